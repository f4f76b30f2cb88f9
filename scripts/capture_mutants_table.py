"""Per model file of SGLang 0.5.23 that defines ``set_eagle3_layers_to_capture(self, layer_ids)``:
the ids shifted by one at the entry of every such method in it (``layer_ids = layer_ids and
[i + 1 for i in layer_ids]`` as its first statement), on a patched checkout, and which of the
capture-contract fork tests kills the mutant (fails on it; the test of the file's own
group is run first, the others only if it passes). The fork tests pin each class's capture by
a table measured on the release, so every file's mutant must be killed.

    .venv/bin/python scripts/capture_mutants_table.py [--workdir DIR]

Run with the fork tests as a fork runs them (``python3 <file>`` in ``.venv-0.5.23``). About
5 minutes on two idle cores. Prints one Markdown table; exit 1 if a mutant lives.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "test"))

from conftest import cached_release_wheel, make_checkout  # noqa: E402
from sglang_eagle_sizing.families.release_0_5_23 import sites  # noqa: E402

PYTHON = REPO / ".venv-0.5.23" / "bin" / "python"
TESTS = [
    "test/registered/unit/speculative/test_eagle3_capture_contract.py",
    "test/registered/unit/speculative/test_eagle3_capture_contract_handed_on.py",
    "test/registered/unit/speculative/test_eagle3_capture_contract_own_rules.py",
]
SHIFT = "layer_ids = layer_ids and [i + 1 for i in layer_ids]"


def shifted(text: str) -> tuple[str, int]:
    """``text`` with the shift first in every ``set_eagle3_layers_to_capture(self,
    layer_ids)``, after its docstring; and how many methods it shifted."""
    lines = text.splitlines(keepends=True)
    at = []
    for node in ast.walk(ast.parse(text)):
        if not (
            isinstance(node, ast.FunctionDef)
            and node.name == "set_eagle3_layers_to_capture"
            and [a.arg for a in node.args.args[:2]] == ["self", "layer_ids"]
        ):
            continue
        body = node.body
        first = body[1] if (
            len(body) > 1
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ) else body[0]
        at.append((first.lineno - 1, first.col_offset))
    for line, column in sorted(at, reverse=True):
        lines.insert(line, " " * column + SHIFT + "\n")
    return "".join(lines), len(at)


def run_test(fork: Path, test: str) -> bool:
    """Whether ``test`` passes on ``fork``."""
    result = subprocess.run(
        [str(PYTHON), test], cwd=fork, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": "python"},
    )
    return result.returncode == 0


def mutant_row(patched: Path, work: Path, model: str) -> tuple[str, int, list[str]]:
    fork = work / model.replace("/", "_")
    shutil.copytree(patched, fork, symlinks=True)
    path = fork / "python/sglang/srt" / model
    text, count = shifted(path.read_text())
    path.write_text(text)
    # its own group's test first; the first that fails kills it
    name = Path(model).stem
    group = next(c for c, names in sites.CAPTURE_CONTRACT_GROUPS.items() if name in names)
    own = TESTS[list(sites.CAPTURE_CONTRACT_GROUPS).index(group)]
    killers = []
    for test in (own, *[t for t in TESTS if t != own]):
        if not run_test(fork, test):
            killers = [Path(test).stem]
            break
    shutil.rmtree(fork)
    return model, count, killers


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="capture-mutants-"))
    package = work / "release"
    with zipfile.ZipFile(cached_release_wheel("0.5.23")) as wheel:
        wheel.extractall(package, [n for n in wheel.namelist() if n.startswith("sglang/")])
    patched = make_checkout(package / "sglang", work / "patched", "v0.5.23")
    subprocess.run(
        [sys.executable, "-m", "sglang_eagle_sizing", "apply", "-q", str(patched)],
        check=True, env={**os.environ, "PYTHONPATH": str(REPO / "python")},
    )
    for test in TESTS:
        if not run_test(patched, test):
            sys.exit(f"error: {test} fails on the patched tree itself")
    with ThreadPoolExecutor(2) as pool:
        rows = list(pool.map(
            lambda m: mutant_row(patched, work, m), sites.CAPTURE_CONTRACT_MODELS
        ))
    print("| model file | setters shifted | killed by |")
    print("| --- | ---: | --- |")
    for model, count, killers in rows:
        print(f"| `{model}` | {count} | {', '.join(killers) or '**lives**'} |")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if any(not killers for _, _, killers in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
