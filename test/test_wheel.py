"""``build-wheel``: a reproducible fork wheel whose RECORD is right, whose files are what
``apply`` writes, and which pip installs into a fresh environment where the patch is in force.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from conftest import CACHE, REPO, probe_json, release_wheel
from sglang_eagle_sizing import wheel
from sglang_eagle_sizing.cli import main as cli_main
from sglang_eagle_sizing.transaction import BACKUP_DIR, LOCK

FORK_VERSION = "0.5.11+eaglesizing1"
FORK_DIST_INFO = f"sglang-{FORK_VERSION}.dist-info/"
UPSTREAM_DIST_INFO = "sglang-0.5.11.dist-info/"


def _build(output: Path, *extra: str) -> Path:
    assert cli_main(["build-wheel", "--output", str(output), *extra]) == 0
    built = sorted(output.glob("*.whl"))
    assert len(built) == 1, built
    return built[0]


@pytest.fixture(scope="module")
def fork_wheel(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("dist"), "--wheel", str(release_wheel()))


def _entries(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {
            i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()
        }


def test_the_name_carries_the_local_version_and_upstream_tags(fork_wheel):
    upstream_tags = release_wheel().name.split("-", 2)[2]
    assert fork_wheel.name == f"sglang-{FORK_VERSION}-{upstream_tags}"


def test_building_twice_gives_the_same_bytes(fork_wheel, tmp_path, monkeypatch):
    # The second build takes the default path: the pinned wheel from the download cache.
    monkeypatch.setenv(wheel.CACHE_ENV, str(CACHE))
    again = _build(tmp_path / "dist")
    assert again.name == fork_wheel.name
    assert again.read_bytes() == fork_wheel.read_bytes()


def test_every_entry_has_fixed_date_and_permissions(fork_wheel):
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


def test_record_lists_every_file_with_its_hash_and_size(fork_wheel):
    entries = _entries(fork_wheel)
    record_name = FORK_DIST_INFO + "RECORD"
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


def test_dist_info_is_renamed_and_metadata_says_fork(fork_wheel):
    entries = _entries(fork_wheel)
    upstream = _entries(release_wheel())
    assert not [n for n in entries if n.startswith(UPSTREAM_DIST_INFO)]
    assert entries[FORK_DIST_INFO + "WHEEL"] == upstream[UPSTREAM_DIST_INFO + "WHEEL"]
    new = entries[FORK_DIST_INFO + "METADATA"].decode().split("\n")
    old = upstream[UPSTREAM_DIST_INFO + "METADATA"].decode().split("\n")
    assert f"Version: {FORK_VERSION}" in new and "Version: 0.5.11" in old
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


def test_the_files_are_what_apply_writes(fork_wheel, patched_root):
    entries = _entries(fork_wheel)
    upstream = _entries(release_wheel())
    package = {n: d for n, d in entries.items() if n.startswith("sglang/")}
    on_disk = {
        str(p.relative_to(patched_root)): p.read_bytes()
        for p in (patched_root / "sglang").rglob("*")
        if p.is_file() and BACKUP_DIR not in p.parts and p.name != LOCK
    }
    assert package == on_disk
    assert [n for n in package if package[n] != upstream[n]]  # the patch is in
    others = {
        n: d
        for n, d in entries.items()
        if not n.startswith(("sglang/", FORK_DIST_INFO))
    }
    assert (
        others == {n: upstream[n] for n in others} and others
    )  # tools/ as upstream ships it
    assert not [n for n in entries if BACKUP_DIR in n or n.endswith(LOCK)]


def test_a_missing_input_wheel_is_a_one_line_error(tmp_path, capsys):
    output = tmp_path / "dist"
    code = cli_main(
        [
            "build-wheel",
            "--wheel",
            str(tmp_path / "sglang-0.5.11-py3-none-any.whl"),
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
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
print("PROBE-JSON " + json.dumps({
    "file": sglang.__file__,
    "version": importlib.metadata.version("sglang"),
    "hidden_size_for": callable(getattr(EagleDraftExtendInput, "hidden_size_for", None)),
    "purelib": sysconfig.get_paths()["purelib"],
    "path": sys.path,
}))
"""


def _fresh_venv(folder: Path) -> tuple[Path, Path]:
    """A venv that sees .venv's site-packages (the dependencies) after its own; it gets pip
    from there too. Returns its python and its site-packages."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True
    )
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [
            str(python),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # addsitedir appends .venv's site-packages (and runs its .pth files, so the editable
    # sglang_eagle_sizing is found) after the fresh one, which site.py put on sys.path first.
    dependencies = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "dot_venv_dependencies.pth").write_text(
        f"import site; site.addsitedir({dependencies!r})\n"
    )
    return python, Path(purelib)


def _run(python: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PIP_DISABLE_PIP_VERSION_CHECK="1"
    )
    return subprocess.run(  # noqa: PLW1510 (the caller checks the exit code)
        [str(python), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_pip_installs_the_fork_into_a_fresh_venv(fork_wheel, tmp_path):
    python, site_packages = _fresh_venv(tmp_path / "fresh")
    work = tmp_path / "work"  # a cwd without any sglang/ folder in it
    work.mkdir()
    dot_venv_sglang = metadata.version("sglang")
    install = _run(
        python,
        [
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-c",
            str(REPO / "constraints.txt"),
            str(fork_wheel),
        ],
        work,
    )
    assert install.returncode == 0, install.stderr[-4000:]

    shown = _run(python, ["-m", "pip", "show", "sglang"], work)
    assert shown.returncode == 0, shown.stderr
    assert f"Version: {FORK_VERSION}" in shown.stdout.splitlines()
    assert f"Location: {site_packages}" in shown.stdout.splitlines()

    probe = probe_json(_run(python, ["-c", PROBE], work))
    assert Path(probe["file"]).is_relative_to(tmp_path / "fresh"), probe["file"]
    assert probe["version"] == FORK_VERSION
    assert probe["hidden_size_for"] is True
    dependencies = sysconfig.get_paths()["purelib"]
    assert probe["path"].index(probe["purelib"]) < probe["path"].index(dependencies)

    check = _run(python, ["-m", "sglang_eagle_sizing", "check"], work)
    assert check.returncode == 0, check.stdout + check.stderr

    # pip left .venv's own sglang alone (it lies outside the fresh environment).
    assert metadata.version("sglang") == dot_venv_sglang
