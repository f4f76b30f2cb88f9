"""What CI costs per release family, from a fresh clone: the set-up's wall time (both environments
at once) and each environment's disk, and the suite's time split by the release its test files
exercise, with the total against CI's 60-minute budget and the 40 minutes aimed at. Prints one
table.

    .venv/bin/python benchmark/ci_time.py                 # clone HEAD into a scratch folder, run it all
    .venv/bin/python benchmark/ci_time.py --junit FILE    # only split a suite already run with
                                                          # pytest --junitxml=FILE

The fresh clone runs what ``.ci/run`` runs: ``scripts/setup.sh`` (both environments, made at the
same time), then ``pytest`` (with ``--junitxml`` added, which changes nothing else). About 35
minutes on the 2-core machine; the machine's load is printed with the figures, since other work
on it inflates them. The scratch clone and its environments (about 20 GB) are removed at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _common import REPO, machine

#: the test files that exercise the 0.5.23 family (its environment and trees); every other
#: file exercises 0.5.9-0.5.11
AFTER_REFACTOR_FILES = ("test_release_0_5_23.py", "test_smoke_0_5_23.py")
BUDGET_MINUTES = 60
AIM_MINUTES = 40


def family_of(test_file: str) -> str:
    return "0.5.23" if Path(test_file).name in AFTER_REFACTOR_FILES else "0.5.9-0.5.11"


def suite_seconds(junit: Path) -> dict[str, float]:
    """Seconds of test time per family, from a pytest JUnit XML file."""
    per_family: dict[str, float] = {}
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "").split(".")
        file = next((f"{m}.py" for m in module if m.startswith("test_")), "")
        family = family_of(file)
        per_family[family] = per_family.get(family, 0.0) + float(case.get("time", 0))
    return per_family


def _du_gb(folder: Path) -> float:
    out = subprocess.run(["du", "-sb", str(folder)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0]) / 1e9


def _timed(command: list[str], cwd: Path) -> float:
    start = time.monotonic()
    subprocess.run(command, cwd=cwd, check=True)
    return time.monotonic() - start


def fresh_clone_run(work: Path) -> tuple[dict, float, Path, int]:
    """(set-up seconds and each environment's disk, suite wall seconds, junit file, pytest's
    exit code) of a fresh clone of HEAD."""
    clone = work / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    # scripts/setup.sh makes both environments at the same time: one wall time for the two
    seconds = _timed(["bash", "scripts/setup.sh"], clone)
    setup = {
        "both": seconds,
        "0.5.9-0.5.11": _du_gb(clone / ".venv"),
        "0.5.23": _du_gb(clone / ".venv-0.5.23"),
    }
    junit = work / "junit.xml"
    start = time.monotonic()
    suite = subprocess.run(
        [
            str(clone / ".venv" / "bin" / "python"),
            "-m",
            "pytest",
            "-n",  # as .ci/run: the test files on both cores
            "2",
            "--dist",
            "loadfile",
            "-q",
            f"--junitxml={junit}",
        ],
        cwd=clone,
        check=False,
    )
    return setup, time.monotonic() - start, junit, suite.returncode


def render(setup: dict | None, wall: float | None, per_family: dict[str, float]) -> str:
    total_tests = sum(per_family.values())
    lines = [
        f"machine: {machine()}; load average at the end {os.getloadavg()[0]:.1f}",
        "",
        f"{'release family':<16} {'disk':>8} {'tests':>9} {'share of tests':>15}",
    ]
    for family in ("0.5.9-0.5.11", "0.5.23"):
        tests = per_family.get(family, 0.0)
        lines.append(
            f"{family:<16} {_gb((setup or {}).get(family)):>8} {_minutes(tests):>9} "
            f"{tests / total_tests if total_tests else 0:>15.0%}"
        )
    lines.append(f"{'tests, summed':<16} {'':>8} {_minutes(total_tests):>9}")
    if setup is not None and wall is not None:
        total = setup["both"] + wall
        lines.append(
            f"fresh clone to green: set-up {_minutes(setup['both'])} (both environments at once) + "
            f"suite {_minutes(wall)} (wall, both cores) = {_minutes(total)}, "
            f"{total / 60 / BUDGET_MINUTES:.0%} of CI's {BUDGET_MINUTES}-minute budget, "
            f"{total / 60 / AIM_MINUTES:.0%} of the {AIM_MINUTES} aimed at"
        )
    return "\n".join(lines)


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def _gb(gb: float | None) -> str:
    return "-" if gb is None else f"{gb:.1f} GB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junit", type=Path, help="split this pytest JUnit XML file only")
    args = parser.parse_args()
    if args.junit is not None:
        if not args.junit.is_file():
            print(f"ci_time: {args.junit}: no such file")
            return 2
        print(render(None, None, suite_seconds(args.junit)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="ci-time-"))
    try:
        setup, wall, junit, pytest_rc = fresh_clone_run(work)
        print(render(setup, wall, suite_seconds(junit)))
    except subprocess.CalledProcessError as error:
        print(f"ci_time: {' '.join(map(str, error.cmd))} failed (exit {error.returncode})")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if pytest_rc != 0:
        print(f"ci_time: the suite failed (pytest exit {pytest_rc}); CI would be red")
    return pytest_rc


if __name__ == "__main__":
    sys.exit(main())
