"""Shared fixtures: a pristine SGLang 0.5.11 from the release wheel, a patched copy of it, a git
checkout laid out like a fork of it, stand-in fork test files for ``apply`` to add, and the
libcuda stub that lets SGLang's worker modules import on a machine without a GPU."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from sglang_eagle_sizing import patch
from sglang_eagle_sizing.cli import main as cli_main
from sglang_eagle_sizing.families import BEFORE_REFACTOR
from sglang_eagle_sizing.families.release_0_5_11.sites import GET_CONFIG_FILES, SITE_FILES
from sglang_eagle_sizing.smoke.server import PORT_SHARE_ENV as SERVER_PORT_SHARE_ENV
from sglang_eagle_sizing.smoke.server import STUB_SOURCE as LIBCUDA_STUB_SOURCE
from sglang_eagle_sizing.wheel import cached_release_wheel

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SUPPORT = Path(__file__).resolve().parent / "support"
# The tests keep downloads in the checkout's .cache unless told otherwise.
os.environ.setdefault("SGLANG_EAGLE_SIZING_CACHE", str(REPO / ".cache"))
CACHE = Path(os.environ["SGLANG_EAGLE_SIZING_CACHE"])
# Under pytest-xdist (gw0, gw1, ...) each worker's servers take their own share of the ports.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault(
        SERVER_PORT_SHARE_ENV,
        f"{os.environ['PYTEST_XDIST_WORKER'].removeprefix('gw')}/"
        f"{os.environ['PYTEST_XDIST_WORKER_COUNT']}",
    )
SGLANG_VERSION = "0.5.11"


def read_by_commands(name: str) -> bool:
    """Whether a command reads this entry of an SGLang wheel: site files, every
    ``speculative/`` module, the version files (what the version tests extract)."""
    if name in ("sglang/_version.py", "sglang/version.py"):
        return True
    if name.startswith("sglang/srt/speculative/") and name.endswith(".py"):
        return True
    return name.removeprefix("sglang/srt/") in (*SITE_FILES, *GET_CONFIG_FILES)


def config_json(folder: Path) -> dict:
    """A config folder's config.json, read as plain JSON (independently of SGLang)."""
    return json.loads((folder / "config.json").read_text())


def hidden_size_in(config: dict) -> int:
    """``hidden_size``, top-level or under ``text_config`` (gemma-3)."""
    return config.get("hidden_size") or config["text_config"]["hidden_size"]


def release_wheel() -> Path:
    """The sglang 0.5.11 wheel from PyPI, downloaded once into the cache."""
    return cached_release_wheel()


@pytest.fixture(scope="session")
def pristine_root(tmp_path_factory) -> Path:
    """A folder holding ``sglang/`` exactly as the release wheel ships it. Do not modify."""
    root = tmp_path_factory.mktemp("pristine")
    with zipfile.ZipFile(release_wheel()) as wheel:
        wheel.extractall(root, [n for n in wheel.namelist() if n.startswith("sglang/")])
    return root


@pytest.fixture(scope="session")
def pristine(pristine_root) -> Path:
    return pristine_root / "sglang"


@pytest.fixture
def tree(pristine, tmp_path) -> Path:
    """A writable copy of the pristine package, fresh for each test."""
    copy = tmp_path / "sglang"
    shutil.copytree(pristine, copy)
    return copy


@pytest.fixture(scope="session")
def patched_root(pristine, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("patched")
    shutil.copytree(pristine, root / "sglang")
    assert cli_main(["apply", "--quiet", str(root / "sglang")]) == 0
    return root


# -- a fork's git checkout -------------------------------------------------------------
#: a test file of the fork's own (stands for SGLang's test/registered/ tree)
FORK_OWN_TEST = "test/registered/unit/speculative/test_fork_own.py"
#: stand-ins for the files under inserted_tests/: one in a folder apply must create in a
#: folder the checkout has (test/registered/unit/speculative/eagle_hidden_sizing/, the CPU
#: tests' folder), one in folders apply must create (test/registered/spec/eagle/)
STAND_IN_TESTS = {
    "test/registered/unit/speculative/eagle_hidden_sizing/test_annotation.py": (
        '"""Stand-in for the fork\'s CPU test."""\n\nimport unittest\n\n\n'
        "class TestStandIn(unittest.TestCase):\n"
        "    def test_runs(self):\n        self.assertTrue(True)\n"
    ),
    "test/registered/spec/eagle/test_eagle_hidden_sizing_e2e.py": (
        '"""Stand-in for the fork\'s CUDA test."""\n'
    ),
}


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
        cwd=cwd, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, (args, result.stderr)
    return result.stdout


def git_status(checkout: Path) -> list[str]:
    return git(checkout, "status", "--porcelain", "--untracked-files=all").splitlines()


def make_checkout(package: Path, target: Path, tag: str | None = "v0.5.11") -> Path:
    """``target`` laid out like a fork's checkout: ``python/sglang`` copied from ``package``
    (without the generated ``_version.py`` a checkout does not track), a ``test/registered/``
    tree, one commit, and the upstream tag."""
    shutil.copytree(package, target / "python" / "sglang",
                    ignore=shutil.ignore_patterns("_version.py"))
    own = target / FORK_OWN_TEST
    own.parent.mkdir(parents=True)
    own.write_text('"""A test the fork already has."""\n')
    git(target, "init", "-q")
    # no background `gc --auto` after the commit: it would pack the objects while a test
    # walks the checkout
    git(target, "config", "gc.auto", "0")
    git(target, "add", "-A")
    git(target, "commit", "-q", "-m", "fork")
    if tag:
        git(target, "tag", tag)
    return target


@pytest.fixture(scope="session")
def release_0_5_23(tmp_path_factory) -> Path:
    """The 0.5.23 wheel's ``sglang`` package, unpacked once. Do not modify."""
    folder = tmp_path_factory.mktemp("release-0.5.23")
    with zipfile.ZipFile(cached_release_wheel("0.5.23")) as wheel:
        wheel.extractall(folder, [n for n in wheel.namelist() if n.startswith("sglang/")])
    return folder / "sglang"


@pytest.fixture(scope="session")
def checkout_source(pristine, tmp_path_factory) -> Path:
    """A git checkout of 0.5.11 (the whole package from the wheel), tagged v0.5.11. Do not
    modify: copy it (``checkout``)."""
    return make_checkout(pristine, tmp_path_factory.mktemp("checkout") / "fork")


@pytest.fixture
def checkout(checkout_source, tmp_path) -> Path:
    copy = tmp_path / "fork"
    shutil.copytree(checkout_source, copy, symlinks=True)
    return copy


@pytest.fixture
def stand_in_tests(tmp_path_factory, monkeypatch) -> dict[str, bytes]:
    """Point the mechanism at a small tree of stand-in fork tests (the real ones are the
    package's inserted_tests/); returns them as ``inserted_test_files(BEFORE_REFACTOR)`` does."""
    folder = write_stand_in_tests(tmp_path_factory.mktemp("inserted_tests"))
    monkeypatch.setitem(patch.INSERTED_TESTS, BEFORE_REFACTOR.name, folder)
    return {key: text.encode() for key, text in STAND_IN_TESTS.items()}


def write_stand_in_tests(folder: Path) -> Path:
    for key, text in STAND_IN_TESTS.items():
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        (folder / key).write_text(text)
    (folder / "README.md").write_text("not a test: never added\n")
    return folder


@pytest.fixture(scope="session")
def libcuda_stub(tmp_path_factory) -> Path:
    """Compile the libcuda stub ``smoke`` ships (``smoke/libcuda_stub.c``) into a folder to put
    on LD_LIBRARY_PATH."""
    folder = tmp_path_factory.mktemp("libcuda-stub")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"),
         str(LIBCUDA_STUB_SOURCE)],
        check=True,
    )
    return folder


def run_python(root: Path, stub: Path, args: list[str], timeout: int = 600) -> subprocess.CompletedProcess:
    """Run Python with ``root`` (holding an ``sglang/``) first on the path and the stub loaded."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(stub), env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=root
    )


def probe_json(result: subprocess.CompletedProcess) -> dict:
    for line in result.stdout.splitlines():
        if line.startswith("PROBE-JSON "):
            return json.loads(line[len("PROBE-JSON "):])
    raise AssertionError(f"no probe output; stderr:\n{result.stderr[-4000:]}")


def run_cli(*args: str) -> tuple[int, str, str]:
    """``sglang-eagle-sizing ARGS`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    return code, out.getvalue(), err.getvalue()


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
