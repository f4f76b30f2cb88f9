"""Shared fixtures: a pristine SGLang 0.5.11 from the release wheel, a patched copy of it, and
the libcuda stub that lets SGLang's worker modules import on a machine without a GPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_eagle_sizing.cli import main as cli_main
from sglang_eagle_sizing.wheel import cached_release_wheel

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
SUPPORT = Path(__file__).resolve().parent / "support"
# The tests keep downloads in the checkout's .cache unless told otherwise.
os.environ.setdefault("SGLANG_EAGLE_SIZING_CACHE", str(REPO / ".cache"))
CACHE = Path(os.environ["SGLANG_EAGLE_SIZING_CACHE"])
SGLANG_VERSION = "0.5.11"


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


@pytest.fixture(scope="session")
def libcuda_stub(tmp_path_factory) -> Path:
    """Compile test/support/libcuda_stub.c into a folder to put on LD_LIBRARY_PATH."""
    folder = tmp_path_factory.mktemp("libcuda-stub")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"),
         str(SUPPORT / "libcuda_stub.c")],
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
