"""Write the table of the series in docs/series.md: ``pr --series`` on a git checkout of
SGLang 0.5.11 (from the release wheel), ``git am`` of every patch on a clone, and at every
commit the fork's CPU test (``python3 <file>``) and ruff's pyflakes rules on what the patch
touched.

    .venv/bin/python scripts/series_table.py            # rewrite the table
    .venv/bin/python scripts/series_table.py --check    # exit 1 if it is stale

About 3 minutes on two cores. CI (test/test_series.py) runs the fork test at a sample of the
commits and checks every other column of the table.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "test" / "support"))
sys.path.insert(0, str(REPO / "test"))

from series_check import TABLE_END, TABLE_START, check_commit, git_am, table, write_series  # noqa: E402
from sglang_eagle_sizing.wheel import cached_release_wheel  # noqa: E402

DOC = REPO / "docs" / "series.md"


def release_checkout(folder: Path) -> Path:
    from conftest import make_checkout

    with zipfile.ZipFile(cached_release_wheel()) as wheel:
        wheel.extractall(folder / "wheel", [n for n in wheel.namelist() if n.startswith("sglang/")])
    return make_checkout(folder / "wheel" / "sglang", folder / "fork")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is stale")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="series-"))
    try:
        checkout = release_checkout(work)
        steps, patches = write_series(checkout, work / "patches")
        commits = git_am(checkout, work / "clone", patches)
        rows = [
            check_commit(work / "clone", commit, step, run_fork_test=True)
            for commit, step in zip(commits, steps)
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    new = table(rows)
    document = DOC.read_text()
    start, end = document.index(TABLE_START), document.index(TABLE_END) + len(TABLE_END) + 1
    updated = document[:start] + new + document[end:]
    if args.check:
        if updated != document:
            print(f"{DOC}: the series table is stale; run scripts/series_table.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(updated)
    sys.stdout.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
