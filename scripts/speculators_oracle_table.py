"""Print the oracle tables of docs/development/speculators-oracle.md: the patched SGLang
0.5.11's EAGLE-3 drafter forward against the ``speculators`` library's own ``Eagle3DraftModel`` forward, per
norm variant and aux-layer count (largest absolute differences of the logits and of the hidden
states carried to the next draft step); which cases catch each mutant; and 0.5.11 as released
on the same checkpoints.

    .venv/bin/python scripts/speculators_oracle_table.py              # patched + released trees
    .venv/bin/python scripts/speculators_oracle_table.py --tree ROOT  # ROOT holds a patched sglang/

Two runs of test/support/speculators_oracle_probe.py side by side (~15 s on two cores, plus
~20 s to extract and patch the release wheel). test/test_speculators_oracle.py asserts what
these tables show.
"""

from __future__ import annotations

import argparse
import json
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

from sglang_eagle_sizing.cli import main as cli_main  # noqa: E402
from sglang_eagle_sizing.wheel import cached_release_wheel  # noqa: E402

PROBE = REPO / "test" / "support" / "speculators_oracle_probe.py"
#: what the test asserts (test/test_speculators_oracle.py)
ATOL, CAUGHT = 1e-5, 1e-3


def trees(folder: Path) -> tuple[Path, Path]:
    """(released root, patched root), each a folder holding ``sglang/`` from the wheel."""
    released, patched = folder / "released", folder / "patched"
    with zipfile.ZipFile(cached_release_wheel()) as wheel:
        wheel.extractall(released, [n for n in wheel.namelist() if n.startswith("sglang/")])
    shutil.copytree(released / "sglang", patched / "sglang")
    if cli_main(["apply", "--quiet", str(patched / "sglang")]) != 0:
        raise SystemExit("apply failed on the release wheel's sglang")
    return released, patched


def probe(root: Path, work: Path, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    work.mkdir(parents=True)
    result = subprocess.run(
        [sys.executable, str(PROBE), str(work), *args],
        env=env, cwd=root, capture_output=True, text=True, check=False,
    )
    for line in result.stdout.splitlines():
        if line.startswith("PROBE-JSON "):
            return json.loads(line[len("PROBE-JSON "):])
    raise SystemExit(f"no probe output from {root}:\n{result.stderr[-4000:]}")


def number(value: float) -> str:
    return "0" if value == 0 else f"{value:.1e}"


def verdict(got: dict, tolerance: float = ATOL) -> str:
    if "error" in got:
        error = re.sub(r"torch\.Size\((\[[^\]]*\])\)", r"\1", got["error"])
        return "fails: " + error[:100].replace("|", "\\|")
    if got["unloaded"]:
        return f"differs: {len(got['unloaded'])} parameters not loaded"
    if not got["hot_token_ids_match"]:
        return "differs: draft vocab map"
    return "equal" if max(got["logits"], got["carried"]) <= tolerance else "differs"


def case_table(cases: dict) -> str:
    lines = [
        "| case | variant | aux | max abs diff, logits | max abs diff, carried hidden "
        "| draft vocab map | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, got in cases.items():
        if "error" in got:
            cells = ["-", "-", "-"]
        else:
            vocab = "same" if got["hot_token_ids_match"] else "differs"
            cells = [number(got["logits"]), number(got["carried"]), vocab]
        lines.append(
            f"| `{name}` | {got['variant']} | {got['aux']} | {' | '.join(cells)} "
            f"| {verdict(got)} |"
        )
    return "\n".join(lines)


def mutant_table(result: dict) -> str:
    lines = [
        "| mutant | what it changes | caught by: max abs diff, logits / carried "
        "| the other cases |",
        "|---|---|---|---|",
    ]
    for mutant, description in result["mutant_descriptions"].items():
        caught, passed = [], []
        for name, got in result["cases"].items():
            m = got["mutants"][mutant]
            if "error" in m:
                caught.append((name, f"({verdict(m)})"))
            elif m["unloaded"] or max(m["logits"], m["carried"]) > CAUGHT:
                unloaded = f", {len(m['unloaded'])} parameters not loaded" if m["unloaded"] else ""
                caught.append((name, f"{number(m['logits'])} / {number(m['carried'])}{unloaded}"))
            else:
                passed.append(max(m["logits"], m["carried"]))
        others = (
            f"{len(passed)} equal (max {number(max(passed))})" if passed else "none"
        )
        if len(caught) == len(result["cases"]) and len({d for _, d in caught}) == 1:
            by = f"all {len(caught)} cases: {caught[0][1]}"
        else:
            by = "; ".join(f"`{name}` {detail}" for name, detail in caught) or "none"
        lines.append(f"| `{mutant}` | {description} | {by} | {others} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree", type=Path, help="a folder holding a patched sglang/ (skips the released tree)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="speculators-oracle-") as tmp:
        tmp = Path(tmp)
        if args.tree:
            released, patched = None, args.tree
        else:
            released, patched = trees(tmp)
        with ThreadPoolExecutor(2) as pool:
            new = pool.submit(probe, patched, tmp / "patched-run", "--all-mutants")
            old = released and pool.submit(probe, released, tmp / "released-run", "--prototype")
            new, old = new.result(), old.result() if old else None
    print(f"patched tree ({new['sglang_file']}): {new['seconds']} s in one process\n")
    print(case_table(new["cases"]))
    if new["mutant_descriptions"]:
        print("\nmutants (each one change to the patched source):\n")
        print(mutant_table(new))
    if old:
        print(f"\n0.5.11 as released ({old['sglang_file']}; config written by hand, "
              "layers.0.* read as midlayer.*):\n")
        print(case_table(old["cases"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
