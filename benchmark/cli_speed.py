"""Wall time of check and apply on the whole installed SGLang tree (a scratch copy), next to
``ruff check --select F821`` over the same files, in the same run. Prints one line per figure.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import TOOL, machine, run, scratch_copy

REPEAT = 3


def timed(args: list[str], env: dict[str, str], expect: tuple[int, ...]) -> float:
    start = time.perf_counter()
    result = run(args, env=env)
    elapsed = time.perf_counter() - start
    assert result.returncode in expect, (args, result.returncode, result.stderr[-2000:])
    return elapsed


def best(
    args: list[str], env: dict[str, str], expect: tuple[int, ...], setup=None
) -> float:
    times = []
    for _ in range(REPEAT):
        if setup is not None:
            setup()
        times.append(timed(args, env, expect))
    return min(times)


def main() -> None:
    root = scratch_copy()
    package = root / "sglang"
    cache = tempfile.mkdtemp(prefix="eagle-sizing-cache-")
    env = dict(os.environ, SGLANG_EAGLE_SIZING_CACHE_DIR=cache)
    from sglang_eagle_sizing.tree import SglangTree

    files = [str(package / "srt" / f) for f in SglangTree.locate(package).files()]
    print(f"machine: {machine()}")
    print(
        f"tree: {len(files)} files the rules read, {sum(os.path.getsize(f) for f in files)} bytes"
    )

    def clear_cache() -> None:
        shutil.rmtree(cache, ignore_errors=True)

    ruff = [
        sys.executable,
        "-m",
        "ruff",
        "check",
        "--isolated",
        "--no-cache",
        "--select",
        "F821",
        *files,
    ]
    print(f"ruff check --select F821 (same files): {best(ruff, env, (0, 1)):.2f} s")
    cold = best([*TOOL, "check", str(package)], env, (1,), setup=clear_cache)
    print(f"check, pristine, cold cache:  {cold:.2f} s")
    print(
        f"check, pristine, warm cache:  {best([*TOOL, 'check', str(package)], env, (1,)):.2f} s"
    )
    print(
        f"check --no-cache, pristine:   {best([*TOOL, 'check', '--no-cache', str(package)], env, (1,)):.2f} s"
    )

    def revert() -> None:
        if (package / ".eagle-sizing-backup").exists():
            assert run([*TOOL, "revert", str(package)], env=env).returncode == 0

    print(
        f"apply, pristine:              {best([*TOOL, 'apply', '-q', str(package)], env, (0,), setup=revert):.2f} s"
    )
    print(
        f"check, patched, cold cache:   {best([*TOOL, 'check', str(package)], env, (0,), setup=clear_cache):.2f} s"
    )
    print(
        f"check, patched, warm cache:   {best([*TOOL, 'check', str(package)], env, (0,)):.2f} s"
    )
    print(
        f"revert:                       {timed([*TOOL, 'revert', str(package)], env, (0,)):.2f} s"
    )
    shutil.rmtree(root)
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
