"""``build-wheel``, for each release family: a reproducible fork wheel whose RECORD is right,
whose files are what ``apply`` writes, and which pip installs into a fresh environment where
the patch is in force and ``check`` passes.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import sglang_eagle_sizing
from conftest import CACHE, REPO, probe_json
from sglang_eagle_sizing import wheel
from sglang_eagle_sizing.cli import main as cli_main
from sglang_eagle_sizing.families import FAMILIES
from sglang_eagle_sizing.families.release_0_5_23.inserted import PARSE as PARSE_0_5_23
from sglang_eagle_sizing.smoke.server import interpreter_for
from sglang_eagle_sizing.transaction import BACKUP_DIR, LOCK
from sglang_eagle_sizing.wheel import cached_release_wheel

#: per family's release: the environment holding its dependencies (the interpreter ``smoke``
#: serves its trees with), the file of pins the docs install it under, and what a module of
#: the patch answers once imported from the installed fork (a value the release lacks)
RELEASES = {
    "0.5.11": {
        "constraints": "constraints.txt",
        "probe": "from sglang.srt.speculative.eagle_info import EagleDraftExtendInput\n"
        "patched = callable(getattr(EagleDraftExtendInput, 'hidden_size_for', None))",
    },
    "0.5.23": {
        "constraints": "requirements-0.5.23.txt",
        "probe": "from sglang.srt.speculative import eagle3_draft_config\n"
        f"patched = callable(getattr(eagle3_draft_config, {PARSE_0_5_23!r}, None))",
    },
}


def test_every_family_ships_a_wheel():
    assert sorted(RELEASES) == sorted(f.known_version for f in FAMILIES)
    # a wheel for every release a family is tested on
    assert list(wheel.RELEASES) == [v for f in FAMILIES for v in f.tested_versions]


def test_a_wheel_of_another_tested_release_is_that_release_patched(tmp_path):
    """0.5.22, tested in the 0.5.23 family: its wheel is its own, with the family's patch."""
    built = _build(tmp_path / "dist", "--release", "0.5.22")
    assert built.name.startswith("sglang-0.5.22+eaglesizing1-")
    with zipfile.ZipFile(built) as archive:
        names = set(archive.namelist())
        metadata = archive.read(_dist_info("0.5.22+eaglesizing1") + "METADATA").decode()
    assert "sglang/srt/speculative/eagle3_draft_config.py" in names
    assert "Version: 0.5.22+eaglesizing1" in metadata


@pytest.fixture(scope="module", params=sorted(RELEASES))
def release(request) -> str:
    return request.param


def _fork_version(release: str) -> str:
    return f"{release}+eaglesizing1"


def _dist_info(version: str) -> str:
    return f"sglang-{version}.dist-info/"


def _build(output: Path, *extra: str) -> Path:
    assert cli_main(["build-wheel", "--output", str(output), *extra]) == 0
    built = sorted(output.glob("*.whl"))
    assert len(built) == 1, built
    return built[0]


@pytest.fixture(scope="module")
def fork_wheel(release, tmp_path_factory) -> Path:
    # the release comes from the wheel's own version: no --release
    wheel_path = cached_release_wheel(release)
    return _build(tmp_path_factory.mktemp("dist"), "--wheel", str(wheel_path))


@pytest.fixture(scope="module")
def applied_root(release, tmp_path_factory) -> Path:
    """The release wheel's ``sglang/`` after ``apply`` on it (as a package folder)."""
    root = tmp_path_factory.mktemp("applied")
    with zipfile.ZipFile(cached_release_wheel(release)) as archive:
        archive.extractall(root, [n for n in archive.namelist() if n.startswith("sglang/")])
    assert cli_main(["apply", "--quiet", str(root / "sglang")]) == 0
    return root


def _entries(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {
            i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()
        }


def test_the_name_carries_the_local_version_and_upstream_tags(release, fork_wheel):
    upstream_tags = cached_release_wheel(release).name.split("-", 2)[2]
    assert fork_wheel.name == f"sglang-{_fork_version(release)}-{upstream_tags}"


def test_building_twice_gives_the_same_bytes(release, fork_wheel, tmp_path, monkeypatch):
    # The second build takes the download path: --release, the pinned wheel from the cache.
    monkeypatch.setenv(wheel.CACHE_ENV, str(CACHE))
    again = _build(tmp_path / "dist", "--release", release)
    assert again.name == fork_wheel.name
    assert again.read_bytes() == fork_wheel.read_bytes()


def test_every_entry_has_fixed_date_and_permissions(release, fork_wheel):
    FORK_DIST_INFO = _dist_info(_fork_version(release))
    with zipfile.ZipFile(fork_wheel) as archive:
        infos = archive.infolist()
    names = [i.filename for i in infos]
    assert names[-1] == FORK_DIST_INFO + "RECORD"
    assert names[:-1] == sorted(
        names[:-1], key=lambda n: (n.startswith(FORK_DIST_INFO), n)
    )
    for info in infos:
        assert info.date_time == (1980, 1, 1, 0, 0, 0), info.filename
        assert (info.external_attr >> 16) in (0o100644, 0o100755), info.filename
        assert info.compress_type == zipfile.ZIP_DEFLATED, info.filename


def _b64_sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_record_lists_every_file_with_its_hash_and_size(release, fork_wheel):
    entries = _entries(fork_wheel)
    record_name = _dist_info(_fork_version(release)) + "RECORD"
    rows = list(csv.reader(io.StringIO(entries[record_name].decode())))
    assert [row[0] for row in rows] == list(
        entries
    )  # every file once, in archive order
    for name, digest, size in rows:
        if name == record_name:
            assert (digest, size) == ("", "")
            continue
        assert digest == "sha256=" + _b64_sha256(entries[name]), name
        assert int(size) == len(entries[name]), name


def test_dist_info_is_renamed_and_metadata_says_fork(release, fork_wheel):
    FORK_VERSION = _fork_version(release)
    FORK_DIST_INFO, UPSTREAM_DIST_INFO = _dist_info(FORK_VERSION), _dist_info(release)
    entries = _entries(fork_wheel)
    upstream = _entries(cached_release_wheel(release))
    assert not [n for n in entries if n.startswith(UPSTREAM_DIST_INFO)]
    assert entries[FORK_DIST_INFO + "WHEEL"] == upstream[UPSTREAM_DIST_INFO + "WHEEL"]
    new = entries[FORK_DIST_INFO + "METADATA"].decode().split("\n")
    old = upstream[UPSTREAM_DIST_INFO + "METADATA"].decode().split("\n")
    assert f"Version: {FORK_VERSION}" in new and f"Version: {release}" in old
    summary = [line for line in new if line.startswith("Summary:")]
    assert len(summary) == 1 and "patched by sglang-eagle-sizing" in summary[0]
    requires = [line for line in new if line.startswith("Requires-Dist:")]
    assert requires and requires == [
        line for line in old if line.startswith("Requires-Dist:")
    ]
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    assert (
        len(old) == len(new) and len(changed) == 2
    )  # Version and Summary, nothing else


def test_the_files_are_what_apply_writes(release, fork_wheel, applied_root):
    FORK_DIST_INFO = _dist_info(_fork_version(release))
    entries = _entries(fork_wheel)
    upstream = _entries(cached_release_wheel(release))
    package = {n: d for n, d in entries.items() if n.startswith("sglang/")}
    on_disk = {
        p.relative_to(applied_root).as_posix(): p.read_bytes()
        for p in (applied_root / "sglang").rglob("*")
        if p.is_file() and BACKUP_DIR not in p.parts and p.name != LOCK
        and "__pycache__" not in p.parts
    }
    assert package == on_disk
    assert [n for n in package if package[n] != upstream.get(n)]  # the patch is in
    others = {
        n: d
        for n, d in entries.items()
        if not n.startswith(("sglang/", FORK_DIST_INFO))
    }
    # anything else upstream ships (0.5.11's tools/; 0.5.23 has none) as it ships it
    assert others == {
        n: d for n, d in upstream.items() if not n.startswith(("sglang/", _dist_info(release)))
    }
    assert not [n for n in entries if BACKUP_DIR in n or n.endswith(LOCK)]


def test_a_missing_input_wheel_is_a_one_line_error(tmp_path, capsys):
    output = tmp_path / "dist"
    code = cli_main(
        [
            "build-wheel",
            "--wheel",
            str(tmp_path / "sglang-0.5.23-py3-none-any.whl"),
            "--output",
            str(output),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and "no such file" in err
    assert not output.exists()


# -- installing the wheel into a fresh environment ---------------------------------------

PROBE = """
import importlib.metadata, json, sys, sysconfig
import sglang
{probe}
print("PROBE-JSON " + json.dumps({{
    "file": sglang.__file__,
    "version": importlib.metadata.version("sglang"),
    "patched": patched,
    "purelib": sysconfig.get_paths()["purelib"],
    "path": sys.path,
}}))
"""


def _purelib(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()


def _fresh_venv(folder: Path, dependencies: Path) -> tuple[Path, Path]:
    """A venv, made by the interpreter ``dependencies`` (the family's environment), that sees
    that environment's site-packages (the release's dependencies and pip) after its own.
    Returns its python and its site-packages."""
    subprocess.run([str(dependencies), "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = _purelib(python)
    # addsitedir appends the family environment's site-packages (and runs its .pth files)
    # after the fresh one, which site.py put on sys.path first.
    (Path(purelib) / "family_dependencies.pth").write_text(
        f"import site; site.addsitedir({_purelib(dependencies)!r})\n"
    )
    return python, Path(purelib)


def _run(python: Path, args: list[str], cwd: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PIP_DISABLE_PIP_VERSION_CHECK="1"
    )
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(  # noqa: PLW1510 (the caller checks the exit code)
        [str(python), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_pip_installs_the_fork_into_a_fresh_venv(release, fork_wheel, tmp_path):
    """Under the family's pins (``-c``), without fetching the ~10 GB of dependencies: the fresh
    environment sees the family's own environment after its site-packages (``.venv`` for
    0.5.11, ``.venv-0.5.23`` for 0.5.23), whose sglang it shadows and leaves alone."""
    family = wheel.family_of_release(release)
    dependencies = interpreter_for(family)
    python, site_packages = _fresh_venv(tmp_path / "fresh", dependencies)
    work = tmp_path / "work"  # a cwd without any sglang/ folder in it
    work.mkdir()
    family_sglang = _run(dependencies, ["-m", "pip", "show", "sglang"], work).stdout
    install = _run(
        python,
        [
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-c",
            str(REPO / RELEASES[release]["constraints"]),
            str(fork_wheel),
        ],
        work,
    )
    assert install.returncode == 0, install.stderr[-4000:]

    shown = _run(python, ["-m", "pip", "show", "sglang"], work)
    assert shown.returncode == 0, shown.stderr
    assert f"Version: {_fork_version(release)}" in shown.stdout.splitlines()
    assert f"Location: {site_packages}" in shown.stdout.splitlines()

    probe = probe_json(_run(python, ["-c", PROBE.format(probe=RELEASES[release]["probe"])], work))
    assert Path(probe["file"]).is_relative_to(tmp_path / "fresh"), probe["file"]
    assert probe["version"] == _fork_version(release)
    assert probe["patched"] is True
    assert probe["path"].index(probe["purelib"]) < probe["path"].index(_purelib(dependencies))

    # check on the installed package, the tool run from its own environment (this one)
    tool = str(Path(sglang_eagle_sizing.__file__).parents[1])
    check = _run(
        Path(sys.executable),
        ["-m", "sglang_eagle_sizing", "check", str(site_packages / "sglang")],
        work,
        tool,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SGLang {release}" in check.stderr
    if family is FAMILIES[0]:
        # 0.5.11's environment holds the tool too: check without PATH reads the installed fork
        check = _run(python, ["-m", "sglang_eagle_sizing", "check"], work, tool)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "fresh/lib/" in check.stderr, check.stderr

    # pip left the family environment's own sglang alone (it lies outside the fresh one)
    assert _run(dependencies, ["-m", "pip", "show", "sglang"], work).stdout == family_sglang
