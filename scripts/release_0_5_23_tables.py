"""Write the tables of SGLang 0.5.23's series in docs/release-0.5.23.md: ``pr --series`` on a
git checkout tagged v0.5.23 (from the release wheel), ``git am`` of every patch, and at every
commit each fork test file the tree then has, run as a fork runs it (``python3 <file>``) in
0.5.23's environment (``.venv-0.5.23``); each patch, and each pull request's folder, on the
release after only what it needs, its tests with it and with its fix taken out; then every
mutant of test/support/mutants_0_5_23.py against the fork test named to kill it.

    .venv/bin/python scripts/release_0_5_23_tables.py            # rewrite the tables
    .venv/bin/python scripts/release_0_5_23_tables.py --check    # exit 1 if they are stale

About 10 to 20 minutes on two cores (the four tables side by side). CI (test/test_release_0_5_23.py) runs a sample of the
mutants (the first of each fork test file, every aux-count reader, the speculators ids off by
one), holds this table to every mutant, and checks the series table's columns that need no
fork test run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "test" / "support"))
sys.path.insert(0, str(REPO / "test"))

from mutants_0_5_23 import MUTANTS  # noqa: E402
from sglang_eagle_sizing.families.release_0_5_23 import concerns  # noqa: E402
from sglang_eagle_sizing.families.release_0_5_23.series import (  # noqa: E402
    NEEDS,
    PULL_REQUESTS,
)
from sglang_eagle_sizing.families.release_0_5_23.sites import TEST_CONCERNS  # noqa: E402
from sglang_eagle_sizing.series import request_folder
from sglang_eagle_sizing.wheel import cached_release_wheel  # noqa: E402

DOC = REPO / "docs" / "release-0.5.23.md"
PYTHON = REPO / ".venv-0.5.23" / "bin" / "python"
SERIES_START, SERIES_END = "<!-- series-0.5.23 -->\n", "<!-- /series-0.5.23 -->\n"
MUTANTS_START, MUTANTS_END = "<!-- mutants-0.5.23 -->\n", "<!-- /mutants-0.5.23 -->\n"
ALONE_START, ALONE_END = "<!-- alone-0.5.23 -->\n", "<!-- /alone-0.5.23 -->\n"
PRS_START, PRS_END = "<!-- pull-requests-0.5.23 -->\n", "<!-- /pull-requests-0.5.23 -->\n"
#: every fork test file of the series (the folder's and those beside it)
TESTS = sorted(f for f in TEST_CONCERNS if f.rsplit("/", 1)[-1].startswith("test_"))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd, capture_output=True, text=True, check=True,
    ).stdout


def checkout(folder: Path) -> Path:
    from conftest import make_checkout

    with zipfile.ZipFile(cached_release_wheel("0.5.23")) as wheel:
        names = [n for n in wheel.namelist() if n.startswith("sglang/")]
        wheel.extractall(folder / "wheel", names)
    return make_checkout(folder / "wheel" / "sglang", folder / "fork", "v0.5.23")


def fork_tests(fork: Path) -> str:
    """``N tests OK`` over every fork test file of the tree, else what failed."""
    return run_tests_of(fork, [f for f in TESTS if (fork / f).is_file()])


def counts(fork: Path, commit: str) -> tuple[int, int]:
    """(SGLang source lines, test lines) the commit adds or removes."""
    source = tests = 0
    for line in git(fork, "show", "--numstat", "--format=", commit).splitlines():
        added, removed, path = line.split("\t")
        lines = int(added) + int(removed)
        if path.startswith("test/"):
            tests += lines
        else:
            source += lines
    return source, tests


def write_series(fork: Path, folder: Path) -> list[str]:
    """``pr --series`` of ``fork`` into ``folder``: the patch files, in order."""
    return subprocess.run(
        [sys.executable, "-m", "sglang_eagle_sizing", "pr", "--series", str(folder),
         "--author", "t <t@example.com>", str(fork)],
        capture_output=True, text=True, check=True,
    ).stdout.split()


def pull_request_patches(folder: Path) -> dict[str, list[str]]:
    """``{pull request's name: its patch files, in order}`` in ``pr --series``'s ``folder``."""
    return {
        request.name: sorted(
            str(p) for p in (folder / request_folder(number, request)).glob("*.patch")
        )
        for number, request in enumerate(PULL_REQUESTS, start=1)
    }


def git_am(fork: Path, patches: list[str]) -> bool:
    """``git am`` of ``patches`` on the checked-out commit: whether they applied (if not,
    the am is aborted)."""
    applied = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "am", "-q",
         "--keep-non-patch", *patches], cwd=fork, capture_output=True, text=True,
        check=False,
    )
    if applied.returncode:
        git(fork, "am", "--abort")
    return applied.returncode == 0


def on_the_release(fork: Path) -> None:
    git(fork, "checkout", "-q", "-f", "v0.5.23")
    git(fork, "clean", "-q", "-f", "-d")


def take_out_the_fix(fork: Path, commits: int) -> None:
    """The SGLang files of the last ``commits`` commits put back as before them (their test
    files kept)."""
    changed = git(fork, "diff", "--name-status", f"HEAD~{commits}", "HEAD").splitlines()
    for status, path in (line.split("\t", 1) for line in changed):
        if path.startswith("test/"):
            continue
        if status == "A":
            (fork / path).unlink()
        else:
            git(fork, "checkout", "-q", f"HEAD~{commits}", "--", path)


def pull_request_rows(work: Path, run_tests: bool = True) -> list[str]:
    """Each pull request's folder on the release after only the pull requests its cover
    letter names (``needs``): whether it applies, its tests with it, and its tests on the
    same tree with its SGLang changes taken out (they must fail)."""
    fork = checkout(work)
    write_series(fork, work / "p")
    folders = pull_request_patches(work / "p")
    rows = []
    for number, request in enumerate(PULL_REQUESTS, start=1):
        on_the_release(fork)
        for needed in request.needs:
            assert git_am(fork, folders[needed]), needed
        own = folders[request.name]
        label = f"| {number} | {request.name} | {len(own)} | {', '.join(request.needs) or '-'} |"
        if not git_am(fork, own):
            rows.append(f"{label} no | | |")
            continue
        if not run_tests:
            rows.append(f"{label} yes |")
            continue
        tests = [f for f, c in TEST_CONCERNS.items() if c in request.concerns]
        with_fix = run_tests_of(fork, tests)
        take_out_the_fix(fork, len(own))
        rows.append(f"{label} yes | {with_fix} | {run_tests_of(fork, tests)} |")
    return rows


def pull_request_table(rows: list[str]) -> str:
    return (
        PRS_START
        + "| # | pull request | patches | needs | applies | its tests | its tests, its fix "
        "taken out |\n"
        + "| ---: | --- | ---: | --- | --- | --- | --- |\n"
        + "".join(row + "\n" for row in rows)
        + PRS_END
    )


def series_rows(work: Path, run_tests: bool = True) -> list[str]:
    fork = checkout(work)
    out = write_series(fork, work / "p")
    git(fork, "am", "--keep-non-patch", *out)
    commits = git(fork, "log", "--reverse", "--format=%H %s", "v0.5.23..HEAD").splitlines()
    rows = []
    for number, line in enumerate(commits, start=1):
        commit, subject = line.split(" ", 1)
        source, tests = counts(fork, commit)
        result = ""
        if run_tests:
            git(fork, "checkout", "-q", commit)
            result = fork_tests(fork)
        rows.append(f"| {number} | {subject} | {source} | {tests} | {result} |")
    return rows


def series_table(rows: list[str]) -> str:
    return (
        SERIES_START
        + "| # | patch | SGLang source lines | test lines | fork tests after it |\n"
        + "| ---: | --- | ---: | ---: | --- |\n"
        + "".join(row + "\n" for row in rows)
        + SERIES_END
    )


def run_tests_of(fork: Path, tests: list[str]) -> str:
    """``N tests OK`` over ``tests`` run as a fork runs them, else the files that fail."""
    ran, failed = 0, []
    for test in tests:
        result = subprocess.run(
            [str(PYTHON), str(fork / test)], cwd=fork, capture_output=True, text=True,
            env={**os.environ, "PYTHONPATH": str(fork / "python")},
        )
        found = re.search(r"^Ran (\d+) tests?", result.stderr, re.M)
        ran += int(found.group(1)) if found else 0
        if result.returncode != 0:
            failed.append(test.rsplit("/", 1)[-1])
    return f"{ran} tests OK" if not failed else "fails: " + ", ".join(failed)


def alone_rows(work: Path) -> list[str]:
    """Each patch on the release with only the patches it needs (``NEEDS``): whether it
    applies, its own tests with it, and its own tests on the same tree with its SGLang
    changes taken out (they must fail)."""
    fork = checkout(work)
    patches = write_series(fork, work / "p")
    order = concerns.ORDER
    rows = []
    for number, (concern, patch) in enumerate(zip(order, patches), start=1):
        on_the_release(fork)
        needs = NEEDS.get(concern, ())
        for needed in needs:
            git(fork, "am", "-q", "--keep-non-patch", patches[order.index(needed)])
        tests = [f for f, c in TEST_CONCERNS.items() if c == concern]
        if not git_am(fork, [patch]):
            rows.append(f"| {number} | {concern} | {', '.join(needs) or '-'} | no | | |")
            continue
        with_fix = run_tests_of(fork, tests)
        take_out_the_fix(fork, 1)
        without = run_tests_of(fork, tests)
        rows.append(
            f"| {number} | {concern} | {', '.join(needs) or '-'} | yes | {with_fix} | "
            f"{without} |"
        )
    return rows


def alone_table(rows: list[str]) -> str:
    return (
        ALONE_START
        + "| # | patch | needs | applies | its tests | its tests, its fix taken out |\n"
        + "| ---: | --- | --- | --- | --- | --- |\n"
        + "".join(row + "\n" for row in rows)
        + ALONE_END
    )


def mutant_rows(work: Path) -> list[str]:
    fork = checkout(work)
    subprocess.run(
        [sys.executable, "-m", "sglang_eagle_sizing", "apply", "-q", str(fork)], check=True
    )
    git(fork, "add", "-A")
    git(fork, "commit", "-q", "-m", "apply")
    rows = []
    for mutant in MUTANTS:
        mutant.apply(fork)
        try:
            result = subprocess.run(
                [str(PYTHON), str(fork / mutant.killed_by)], cwd=fork,
                capture_output=True, text=True,
                env={**os.environ, "PYTHONPATH": str(fork / "python")},
            )
        finally:
            git(fork, "checkout", "-q", "--", ".")
        failed = sorted(set(re.findall(r"^(?:FAIL|ERROR): (test_\w+)", result.stderr, re.M)))
        verdict = "killed: " + ", ".join(failed) if result.returncode else "**survives**"
        rows.append(f"| {mutant.name} | `{mutant.killed_by.rsplit('/', 1)[-1]}` | {verdict} |")
    return rows


def mutant_table(rows: list[str]) -> str:
    return (
        MUTANTS_START
        + "| mutant | fork test | result |\n| --- | --- | --- |\n"
        + "".join(row + "\n" for row in rows)
        + MUTANTS_END
    )


def replaced(document: str, start: str, end: str, new: str) -> str:
    i, j = document.index(start), document.index(end) + len(end)
    return document[:i] + new + document[j:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the tables are stale")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="release-0.5.23-"))
    try:
        # four checkouts of their own, run side by side (each test run mostly imports)
        with ThreadPoolExecutor(4) as pool:
            series = pool.submit(series_rows, work / "series")
            mutants = pool.submit(mutant_rows, work / "mutants")
            alone = pool.submit(alone_rows, work / "alone")
            requests = pool.submit(pull_request_rows, work / "pull-requests")
            series = series_table(series.result())
            mutants = mutant_table(mutants.result())
            alone = alone_table(alone.result())
            requests = pull_request_table(requests.result())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    document = DOC.read_text()
    updated = replaced(document, SERIES_START, SERIES_END, series)
    updated = replaced(updated, MUTANTS_START, MUTANTS_END, mutants)
    updated = replaced(updated, ALONE_START, ALONE_END, alone)
    updated = replaced(updated, PRS_START, PRS_END, requests)
    if args.check:
        if updated != document:
            print(f"{DOC}: the 0.5.23 tables are stale; run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
