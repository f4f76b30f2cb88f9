"""The commands a fork maintainer runs, timed on a git checkout of SGLang 0.5.11 or, with
``--release 0.5.23``, 0.5.23 (from the release wheel, tagged v<release>), for two versions of this tool side by side in one run:
``--before DIR`` and ``--after DIR`` are folders holding ``sglang_eagle_sizing`` (e.g. a
``git archive`` of an older commit's ``python/``, and this checkout's ``python/``).

Each version gets its own fresh cache folder (``SGLANG_EAGLE_SIZING_CACHE``) and its own copy
of the checkout; the commands run in the order a maintainer runs them. Prints a Markdown table
(seconds of wall time) and the machine's load average before and after.

    .venv/bin/python benchmark/user_speed.py --before ../before/python --after python
    .venv/bin/python benchmark/user_speed.py ... --no-series   # without the two pr --series
    .venv/bin/python benchmark/user_speed.py --before python --after python --sides after \
        --release 0.5.23                                      # this version, on 0.5.23
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _common import REPO, machine  # noqa: E402


RELEASE = "0.5.11"


def wheel() -> Path:
    sys.path.insert(0, str(REPO / "python"))
    from sglang_eagle_sizing.wheel import cached_release_wheel

    return cached_release_wheel(RELEASE)


def make_checkout(target: Path) -> Path:
    with zipfile.ZipFile(wheel()) as archive:
        names = [n for n in archive.namelist() if n.startswith("sglang/") and n != "sglang/_version.py"]
        archive.extractall(target / "python", names)
    own = target / "test/registered/unit/speculative/test_fork_own.py"
    own.parent.mkdir(parents=True)
    own.write_text('"""A test the fork already has."""\n')
    git = ["git", "-c", "user.name=fork", "-c", "user.email=fork@example.com"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", f"v{RELEASE}"], ["tag", f"v{RELEASE}"]):
        subprocess.run([*git, *args], cwd=target, check=True)
    return target


def timed(code: Path, cache: Path, cwd: Path, *args: str) -> tuple[float, int]:
    # XDG_CACHE_HOME too: older versions kept check's cache there (SGLANG_EAGLE_SIZING_CACHE_DIR)
    env = dict(
        os.environ,
        PYTHONPATH=str(code),
        SGLANG_EAGLE_SIZING_CACHE=str(cache),
        XDG_CACHE_HOME=str(cache / "xdg"),
    )
    env.pop("SGLANG_EAGLE_SIZING_CACHE_DIR", None)
    env.setdefault("GIT_AUTHOR_NAME", "fork")
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "sglang_eagle_sizing", *args],
        cwd=cwd, env=env, capture_output=True, text=True, check=False,
    )
    return time.perf_counter() - start, result.returncode


def bad_config(root: Path) -> tuple[Path, Path]:
    draft, target = root / "draft", root / "target"
    for folder in (draft, target):
        folder.mkdir(parents=True)
    (draft / "config.json").write_text("{not json")
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return draft, target


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--no-series", action="store_true")
    parser.add_argument("--release", choices=("0.5.11", "0.5.23"), default="0.5.11")
    parser.add_argument(
        "--sides", default="before,after", help="which to run (a rerun of one side: after)"
    )
    args = parser.parse_args()
    global RELEASE
    RELEASE = args.release
    scratch = Path(tempfile.mkdtemp(prefix="eagle-sizing-user-speed-"))
    pristine = make_checkout(scratch / "pristine")
    draft, target = bad_config(scratch / "bad")
    steps = [
        ("check . (cold cache)", ("check", "."), "fork"),
        ("check . (warm cache)", ("check", "."), "fork"),
        ("diff . (first)", ("diff", "."), "fork"),
        ("diff . (again)", ("diff", "."), "fork"),
        ("apply . (after diff)", ("apply", "."), "fork"),
        ("revert .", ("revert", "."), "fork"),
        ("apply . (cold cache, fresh checkout)", ("apply", "."), "fresh"),
        ("report on a config that is not JSON", ("report", str(draft), str(target)), "fork"),
        ("build-wheel --release R --output DIR", ("build-wheel", "--release", RELEASE, "--output", str(scratch / "dist")), "fork"),
    ]
    if not args.no_series:
        steps += [
            ("pr --series DIR . (first)", ("pr", "--series", "SERIES", "--author", "A <a@b.c>", "."), "fork"),
            ("pr --series DIR . (again)", ("pr", "--series", "SERIES", "--author", "A <a@b.c>", "."), "fork"),
        ]
    print(f"SGLang {RELEASE}; machine: {machine()}; load average before: {os.getloadavg()}", flush=True)
    figures: dict[str, dict[str, str]] = {}
    sides = (("before", args.before.resolve()), ("after", args.after.resolve()))
    for label, code in [side for side in sides if side[0] in args.sides.split(",")]:
        cache = scratch / f"cache-{label}"
        fork = scratch / f"fork-{label}"
        fresh = scratch / f"fresh-{label}"
        shutil.copytree(pristine, fork, symlinks=True)
        shutil.copytree(pristine, fresh, symlinks=True)
        wheels = cache / "wheels"  # the release wheel is not what is timed
        wheels.mkdir(parents=True)
        os.symlink(wheel(), wheels / wheel().name)
        for name, command, where in steps:
            command = tuple(str(scratch / f"series-{label}") if w == "SERIES" else w for w in command)
            if where == "fresh":  # a new machine: nothing cached but the wheel
                for entry in cache.iterdir():
                    if entry != wheels:
                        shutil.rmtree(entry, ignore_errors=True)
            seconds, status = timed(code, cache, fork if where == "fork" else fresh, *command)
            figures.setdefault(name, {})[label] = f"{seconds:.1f} s (exit {status})"
            print(f"{label:6} {name}: {seconds:.1f} s, exit {status}", flush=True)
    print(f"load average after: {os.getloadavg()}")
    print("\n| command | before | after |\n| --- | ---: | ---: |")
    for name, row in figures.items():
        print(f"| `{name}` | {row.get('before', '')} | {row.get('after', '')} |")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
