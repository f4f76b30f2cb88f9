"""Regenerate the mutation table of docs/fork-tests.md: run the fork's CPU test on the
patched SGLang 0.5.11 and on every mutant of it (test/support/mutants.py), two runs at a
time, and write which tests failed on each mutant.

    .venv/bin/python scripts/fork_mutation_table.py            # rewrite the table
    .venv/bin/python scripts/fork_mutation_table.py --check    # exit 1 if it is stale

76 mutants, each a run of about 35 s: 24 minutes on two cores (2026-12-06). CI does not run
this; test/test_fork_tests.py runs a sample of the mutants (one per rule and site kind)
and checks that their rows of the table are what they produce.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "test" / "support"))

from mutants import (  # noqa: E402
    Mutant,
    all_mutants,
    mutant_root,
    mutation_table,
    run_test_file,
    table_rows,
    with_harness,
    with_table,
)
from sglang_eagle_sizing.cli import main as cli_main  # noqa: E402
from sglang_eagle_sizing.wheel import cached_release_wheel  # noqa: E402

#: the fork's CPU tests: every file of the folder runs in one process per mutant
CPU_TESTS = (
    REPO
    / "python/sglang_eagle_sizing/families/release_0_5_11/inserted_tests"
    / "test/registered/unit/speculative/eagle_hidden_sizing"
)
DOC = REPO / "docs" / "fork-tests.md"
PARALLEL_RUNS = 2


def trees(folder: Path) -> tuple[Path, Path]:
    """(pristine root, patched root), each a folder holding ``sglang/``; the patched one
    with the fork tests' harness, as a checkout has it."""
    pristine, patched = folder / "pristine", folder / "patched"
    with zipfile.ZipFile(cached_release_wheel()) as wheel:
        names = [n for n in wheel.namelist() if n.startswith("sglang/")]
        wheel.extractall(pristine, names)
    shutil.copytree(pristine / "sglang", patched / "sglang")
    if cli_main(["apply", "--quiet", str(patched / "sglang")]) != 0:
        raise SystemExit("apply failed on the release wheel's sglang")
    return pristine, with_harness(patched, folder / "patched-with-harness")


NOT_RUN = "not run yet: `scripts/fork_mutation_table.py`"


def table_text(mutants: list[Mutant], done: dict[str, str], document: str) -> str:
    """The table: a new row for each mutant in ``done``, else the row ``document`` has,
    else a row saying it has not been run."""
    kept = {row.split("`")[1]: row for row in table_rows(document)}
    kept.update(done)
    lines = mutation_table([]).splitlines()
    rows = [
        kept.get(m.name)
        or f"| `{m.name}` | {m.description.replace('|', chr(92) + '|')} | {NOT_RUN} |"
        for m in mutants
    ]
    return "\n".join(lines[:4] + rows + lines[4:]) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the table is stale"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        help="run these mutants only; the other rows are kept as the table has them",
    )
    args = parser.parse_args()
    started = time.monotonic()
    done: dict[str, str] = {}
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="fork-mutants-") as tmp:
        pristine, patched = trees(Path(tmp))
        baseline = run_test_file(patched, CPU_TESTS)
        if baseline.returncode != 0:
            print(baseline.output[-4000:], file=sys.stderr)
            raise SystemExit("the fork's CPU tests fail on the patched tree")
        mutants = all_mutants(pristine / "sglang" / "srt", patched / "sglang" / "srt")
        unknown = set(args.only or ()) - {m.name for m in mutants}
        if unknown:
            raise SystemExit(f"no such mutants: {sorted(unknown)}")
        chosen = [m for m in mutants if not args.only or m.name in args.only]
        roots = [
            mutant_root(patched, m, Path(tmp) / "mutants" / f"{i:02d}")
            for i, m in enumerate(chosen)
        ]

        def run(index: int) -> None:
            mutant, result = chosen[index], run_test_file(roots[index], CPU_TESTS)
            row = mutation_table([(mutant, result)]).splitlines()[4]
            outcome = (
                "passed" if result.returncode == 0 else f"{len(result.failed)} failed"
            )
            with lock:
                done[mutant.name] = row
                print(
                    f"  {len(done)}/{len(chosen)} {outcome:<10} {mutant.name}",
                    flush=True,
                )
                if not args.check:  # a run cut short keeps what it found
                    DOC.write_text(
                        with_table(
                            DOC.read_text(), table_text(mutants, done, DOC.read_text())
                        )
                    )

        with ThreadPoolExecutor(PARALLEL_RUNS) as pool:
            list(pool.map(run, range(len(chosen))))
    print(
        f"{len(chosen)} of {len(mutants)} mutants, {PARALLEL_RUNS} runs at a time: "
        f"{time.monotonic() - started:.0f} s; one run on the patched tree "
        f"{baseline.seconds:.1f} s"
    )
    if args.check:
        current = DOC.read_text()
        if current != with_table(current, table_text(mutants, done, current)):
            print("docs/fork-tests.md's mutation table is stale", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
