"""Shared by the benchmarks: a scratch copy of the installed SGLang, and the machine."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOL = [sys.executable, "-m", "sglang_eagle_sizing"]


def installed_sglang() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    assert (
        spec is not None and spec.submodule_search_locations
    ), "sglang is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def scratch_copy() -> Path:
    """A copy of the installed sglang package (never the installed one), without bytecode."""
    root = Path(tempfile.mkdtemp(prefix="eagle-sizing-bench-"))
    shutil.copytree(
        installed_sglang(),
        root / "sglang",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return root


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"nproc {os.cpu_count()}, {cpu}, Python {platform.python_version()}"


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=False, capture_output=True, text=True, **kwargs)


def write_between(doc: Path, text: str, start: str, end: str) -> bool:
    """Put ``text`` between the ``start`` and ``end`` marker lines of ``doc``, in place of
    what is there; False (after one line on stderr) if ``doc`` lacks them."""
    current = doc.read_text()
    first, last = current.find(start + "\n"), current.find(end + "\n")
    if first < 0 or last < first:
        print(f"error: {doc}: no {start} ... {end} lines", file=sys.stderr)
        return False
    doc.write_text(current[: first + len(start) + 1] + text + current[last:])
    return True
