"""Serve run-time mutants of the patched tree in smoke cases and say which the server catches.

    .venv/bin/python scripts/smoke_mutants.py --reference FILE [FILE ...] [--workdir DIR]
        [--mutant NAME=CASE ...]

``--reference`` names runs of ``benchmark/smoke_matrix.py --save-json FILE`` (or ``smoke
--json FILE``) holding every named case between them. Each mutant (``test/support/mutants.py``:
a site put back to 0.5.11's call, or a rule of the contract broken) is served in its case from
a patched copy of the release with that one file changed, and is caught when the server
crashes, or serves other tokens or another accept length than the patched tree did in the
saved run. Prints a Markdown table (docs/development/smoke-internals.md has it). Without
``--mutant``: the idle-input mutants on the DP-attention cases, with the narrow drafter and
without it. About a minute a mutant on two idle cores (two ranks). CI serves four mutants (test/test_smoke.py);
this script is for the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "test" / "support"))

from mutants import MutantError, mutant_named, mutant_root  # noqa: E402
from sglang_eagle_sizing.cli import main as cli_main  # noqa: E402
from sglang_eagle_sizing.families import BEFORE_REFACTOR  # noqa: E402
from sglang_eagle_sizing.smoke import cache_dir  # noqa: E402
from sglang_eagle_sizing.smoke.cases import case_named  # noqa: E402
from sglang_eagle_sizing.smoke.runner import (  # noqa: E402
    Models,
    differences,
    release_root,
    serve_case,
)

NARROW_V1 = "eagle3-dp-attention-narrow-drafter-v1"
NARROW_V2 = "eagle3-dp-attention-narrow-drafter-v2"
#: (mutant, case): every idle-input site and width rule a DP-attention case reaches, in the
#: case whose drafter is narrower than the target, and two of them with the 64-wide drafter
DEFAULT = (
    ("site EAGLEWorker._draft_preprocess_idle", NARROW_V1),
    ("site EAGLEWorker.forward_draft_extend_after_decode", NARROW_V1),
    ("idle: EAGLEWorker keeps verify's idle input", NARROW_V1),
    ("rule decode width: the target's", NARROW_V1),
    ("rule extend width: 0.5.11's v1 rule", NARROW_V1),
    ("site EAGLEWorkerV2.forward_batch_generation", NARROW_V2),
    ("rule extend width: 0.5.11's v1 rule", "eagle3-dp-attention-v1"),
    ("site EAGLEWorkerV2.forward_batch_generation", "eagle3-dp-attention-v2"),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=True, metavar="FILE", nargs="+")
    parser.add_argument("--mutant", action="append", default=[], metavar="NAME=CASE")
    parser.add_argument("--workdir")
    args = parser.parse_args()
    pairs = [tuple(p.split("=", 1)) for p in args.mutant] if args.mutant else list(DEFAULT)
    runs = {}
    for file in args.reference:
        saved = json.loads(Path(file).read_text())
        runs.update({e["case"]: e["tree"] for e in saved.get("report", saved)["cases"]})
    missing = sorted({case for _, case in pairs} - set(runs))
    if missing:
        print(f"error: no run of {', '.join(missing)} in {' '.join(args.reference)}",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="smoke-mutants-") as scratch:
        work = Path(args.workdir).resolve() if args.workdir else Path(scratch)
        patched = work / "patched"
        if not (patched / "sglang").is_dir():
            import shutil

            shutil.copytree(release_root(cache_dir()) / "sglang", patched / "sglang")
            if cli_main(["apply", "--quiet", str(patched / "sglang")]) != 0:
                print("error: apply failed on the release's sglang", file=sys.stderr)
                return 1
        srt = patched / "sglang" / "srt"
        pristine = release_root(cache_dir()) / "sglang" / "srt"
        rows = []
        for index, (name, case_name) in enumerate(pairs):
            try:
                mutant = mutant_named(name, pristine, srt)
            except MutantError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            case, reference = case_named(case_name, BEFORE_REFACTOR.smoke_cases), runs[case_name]
            root = mutant_root(patched, mutant, work / "mutants" / str(index))
            run = serve_case(root, "mutant", case, Models(work / "models"), work / "runs",
                             cache_dir())
            caught = differences(run, reference, case.batches)
            verdict = "; ".join(caught) if caught else "**survived**"
            if run.status == "served":
                # the figures behind "another accept length": the mutant's / the patched tree's
                verdict += (f" (accept length {run.accept_length:.3f} / "
                            f"{reference['accept_length']:.3f})")
            rows.append((name, mutant.description, case_name, verdict.replace("|", "\\|")[:240]))
            print(f"{name} in {case_name}: {verdict}", file=sys.stderr, flush=True)
    print("| mutant | what it does | case | caught by |")
    print("| --- | --- | --- | --- |")
    for name, description, case_name, verdict in rows:
        print(f"| `{name}` | {description} | `{case_name}` | {verdict} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
