"""Generate docs/development/capture-rules.md: which hidden states each SGLang model class
that defines ``set_eagle3_layers_to_capture`` captures for an EAGLE-3 drafter, per release
family, released tree beside patched tree, computed by calling each class's own method
(``python/sglang_eagle_sizing/probes/capture_rules_probe.py``, run in the family's environment).

    .venv/bin/python scripts/capture_rules_table.py [--out docs/development/capture-rules.md]
    .venv/bin/python scripts/capture_rules_table.py --json --family 0.5.23 --only llama ...
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "python/sglang_eagle_sizing/probes/capture_rules_probe.py"
DATA = REPO / "test/data"
MARK = "CAPTURE-RULES "
NUM_LAYERS = 24
#: family -> the environment holding its release
ENVIRONMENTS = {"0.5.11": REPO / ".venv", "0.5.23": REPO / ".venv-0.5.23"}

#: (case, heading); ids of the SGLang cases are SGLang-format layer ids (eagle_config), the
#: speculators case's are hidden-state indices (the speculators library's own)
CASES = (
    ("none", "no ids"),
    ("first1", "first id 1"),
    ("first2", "first id 2"),
    ("last_l_minus_1", "last id L-1"),
    ("last_l", "last id L"),
    ("speculators", "speculators"),
)


def declared_ids(num_layers: int) -> dict[str, list[int] | None]:
    half = num_layers // 2
    return {
        "none": None,
        "first1": [1, half, num_layers - 4],
        "first2": [2, half, num_layers - 4],
        "last_l_minus_1": [1, half, num_layers - 1],
        "last_l": [1, half, num_layers],
        "speculators": [3, half, num_layers - 1],
    }


def write_cases(into: Path, num_layers: int) -> Path:
    """A Llama target config of ``num_layers`` layers and one drafter config per case (the
    shared Llama-3.1-8B SpecForge drafter with the case's ``eagle_config`` ids; the shared
    speculators drafter with the case's ids); returns the probe's CASES_JSON."""
    specforge = DATA / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3"
    target = json.loads((specforge / "target/config.json").read_text())
    target["num_hidden_layers"] = num_layers
    (into / "target").mkdir(parents=True)
    (into / "target/config.json").write_text(json.dumps(target))
    cases = {}
    for case, ids in declared_ids(num_layers).items():
        if case == "speculators":
            folder = DATA / "llama3.1-8b-instruct__speculators-eagle3-4-aux-ids/draft"
            config = json.loads((folder / "config.json").read_text())
            config["eagle_aux_hidden_state_layer_ids"] = ids
        else:
            config = json.loads((specforge / "draft/config.json").read_text())
            config.pop("eagle_config", None)
            if ids is not None:
                config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids}
        (into / case).mkdir()
        (into / case / "config.json").write_text(json.dumps(config))
        cases[case] = {"draft": str(into / case), "declared": ids}
    path = into / "cases.json"
    path.write_text(
        json.dumps(
            {"num_layers": num_layers, "target": str(into / "target"), "cases": cases}
        )
    )
    return path


def run_probe(python: Path, root: Path, cases: Path, only: list[str]) -> dict:
    from sglang_eagle_sizing.report.release_0_5_23 import probe_json

    result, last = probe_json(python, root, [str(PROBE), str(cases), *only], MARK)
    if result is None:
        raise RuntimeError(f"{python} could not probe {root}: {last}")
    return result


def probe_family(
    family: str, cases: Path, only: list[str], trees=("released", "patched")
) -> dict:
    """{tree: probe result} for the family's installed release and the patch applied to a
    scratch copy of it (``after_refactor.report.both_trees``)."""
    sys.path.insert(0, str(REPO / "python"))
    from sglang_eagle_sizing.report.release_0_5_23 import both_trees
    from sglang_eagle_sizing.tree import SglangTree

    venv = ENVIRONMENTS[family]
    python = venv / "bin/python"
    package = next((venv / "lib").glob("python3*/site-packages/sglang"))
    tree = SglangTree.locate(str(package), allow_untested_version=True)
    with both_trees(tree) as (released_root, patched_root, origin):
        roots = {"released": released_root, "patched": patched_root}
        with ThreadPoolExecutor(2) as pool:
            runs = {
                name: pool.submit(run_probe, python, roots[name], cases, only)
                for name in trees
            }
            results = {name: run.result() for name, run in runs.items()}
    for result in results.values():
        result["origin"] = origin
    return results


def shown(root: str) -> str:
    """A tree's path as the document shows it: from its environment's folder
    (``.venv-0.5.23/lib/python3.11/site-packages/sglang``), never the machine's own."""
    parts = Path(root).parts
    start = next((i for i, part in enumerate(parts) if part.startswith(".venv")), len(parts) - 1)
    return "/".join(parts[start:])


# -- reading the rule off what each case captured ---------------------------------------------
def describe(
    cell: dict | None, declared: list[int] | None, num_layers: int, case: str
) -> str:
    if cell is None:
        return "-"
    if "refused" in cell:
        return "refused"
    if "raises" in cell:
        return "raises " + cell["raises"].split(":", 1)[0]
    got = cell["captured"]
    if declared is None:
        default = [2, num_layers // 2, num_layers - 3]
        if got == default:
            return "[2, L//2, L-3]"
        if got == [i + 1 for i in default]:
            return "+1 of [2, L//2, L-3]"
        return str(got)
    if got == [i + 1 for i in declared]:
        return "+1"
    if got == declared:
        return "as given"
    if got == [i - 1 for i in declared]:
        return "-1"
    return str(got)


def rule_of(row: dict, num_layers: int) -> str:
    """The class's rule for SGLang-format ids, named from what it captured in each case."""
    if row.get("unknown"):
        return "unknown"
    ids = declared_ids(num_layers)
    d = {
        case: describe(row["cells"].get(case), ids[case], num_layers, case)
        for case, _ in CASES
    }
    if d["first1"] == "+1" and d["first2"] == "as given":
        base = "+1 only if the first id is 1, else as given"
    elif (
        d["first1"] == d["first2"] == d["last_l_minus_1"] == "+1"
        and d["last_l"] == "as given"
    ):
        base = "as given if max == L, else +1; captures the final boundary"
    elif d["first1"] == d["first2"] == "+1":
        base = "+1 always"
    elif d["first1"] == d["first2"] == "as given":
        base = "as given (takes layer indices; an inner model)"
    else:
        base = f"first id 1: {d['first1']}; first id 2: {d['first2']}"
    extra = [
        f"last id {label}: {d[case]}"
        for case, label in (("last_l_minus_1", "L-1"), ("last_l", "L"))
        if d[case].startswith("raises")
    ]
    if d["none"] != "[2, L//2, L-3]":
        extra.append(f"no ids: {d['none']}")
    return base + ("" if not extra else " (" + "; ".join(extra) + ")")


def cell_text(cell: dict | None) -> str:
    if cell is None:
        return "-"
    if "refused" in cell:
        return "refused"
    if "raises" in cell:
        return cell["raises"].split(":", 1)[0]
    return str(cell["captured"]).replace(" ", "")


def contract_of(row: dict | None) -> str:
    """The patched row's declared contract beside its capture: ``undeclared``, ``= capture``
    (the classmethod answered what the method captured in every case it ran), or the cases
    where they differ."""
    if row is None or row.get("unknown"):
        return "-"
    if not row.get("declares"):
        return "undeclared"
    differ = [
        case
        for case, cell in row["cells"].items()
        if "captured" in cell and cell.get("declared") != cell["captured"]
    ]
    return "= capture" if not differ else "**differs: " + ", ".join(differ) + "**"


def render_family(
    family: str, results: dict, num_layers: int, seconds: float
) -> list[str]:
    released, patched = results["released"], results["patched"]
    ids = declared_ids(num_layers)
    patched_rows = {(r["file"], r["class"]): r for r in patched["rows"]}
    lines = [
        f"## SGLang {released['version']} ({family} family): {len(released['files'])} model files "
        + "define `set_eagle3_layers_to_capture`",
        "",
        f"Released: `{shown(released['root'])}`; patched: the patch applied to a scratch copy "
        + "of it. "
        + f"Probed in {seconds:.0f} s. What the model runner hands the class, per case "
        + "(released / patched):",
        "",
        "| case | declared | released passes | patched passes |",
        "| --- | --- | --- | --- |",
    ]
    for case, label in CASES:

        def passed(result, case=case):
            value = result["passed"][case]
            if isinstance(value, str):
                return f"refused: {value[:160]}"
            return f"`{value.get('eagle_aux_hidden_state_layer_ids')}`" + "".join(
                f", {k}=`{v}`"
                for k, v in value.items()
                if k
                not in (
                    "eagle_aux_hidden_state_layer_ids",
                    "eagle_use_aux_hidden_state",
                )
            )

        lines.append(
            f"| {label} | `{ids[case]}` | {passed(released)} | {passed(patched)} |"
        )
    groups: dict[str, list[dict]] = {}
    for row in released["rows"]:
        groups.setdefault(rule_of(row, num_layers), []).append(row)
    lines += [
        "",
        f"{len(released['rows'])} classes, {len(groups)} rules (released tree):",
        "",
    ]
    for rule, rows in sorted(groups.items(), key=lambda item: -len(item[1])):
        lines.append(f"- {rule}: {len(rows)}")
    contracts = [contract_of(r) for r in patched["rows"] if not r.get("unknown")]
    undeclared = [
        f"{r['file']}.{r['class']}"
        for r in patched["rows"]
        if not r.get("unknown") and not r.get("declares")
    ]
    flags = [
        r
        for r in patched["rows"]
        if r.get("declares")
        and r.get("final_flag") != r.get("final_boundary", "").startswith("yes")
    ]
    if not any(r.get("declares") for r in patched["rows"]):
        lines += [
            "",
            "Patched tree: the patch of this family declares no class's capture; each class's"
            + " own method decides, as on the release.",
        ]
    else:
        lines += [
            "",
            (
                f"Patched tree: {contracts.count('= capture')} classes declare their capture "
                "(`get_eagle3_layers_to_capture`, read from the config alone) and capture exactly "
                f"what they declare in every case; {sum(c.startswith('**') for c in contracts)} "
                f"differ; undeclared: {', '.join(undeclared) or 'none'} (the inner decoder stacks "
                "take the indices their outer class computes). Classes whose "
                "`eagle3_captures_final_hidden_state` differs from what their forward does: "
                f"{', '.join(r['class'] for r in flags) or 'none'}."
            ),
        ]
    header = " | ".join(label for _, label in CASES)
    for rule, rows in sorted(groups.items(), key=lambda item: -len(item[1])):
        lines += [
            "",
            f"### {rule}",
            "",
            f"| file | class | registered | method of | {header} | forward captures L"
            + " | patched: declared |",
            "| --- | --- | --- | --- |" + " --- |" * len(CASES) + " --- | --- |",
        ]
        for row in rows:
            if row.get("unknown"):
                lines.append(
                    f"| {row['file']} | {row['class']} | - | - | unknown: {row['unknown']} |"
                    + " |" * (len(CASES) + 1)
                )
                continue
            other = patched_rows.get((row["file"], row["class"]), {"cells": {}})
            cells = []
            for case, _ in CASES:
                now, then = (
                    cell_text(row["cells"].get(case)),
                    cell_text(other.get("cells", {}).get(case)),
                )
                cells.append(now if now == then else f"{now} → **{then}**")
            lines.append(
                f"| {row['file']} | {row['class']} | {'yes' if row['registered'] else 'no'} | "
                f"{row['method_of']} | "
                + " | ".join(cells)
                + f" | {row['final_boundary']} | {contract_of(patched_rows.get((row['file'], row['class'])))} |"
            )
    return lines


def render(families: dict, num_layers: int, timings: dict) -> str:
    lines = [
        "# EAGLE-3 capture rules per model class, released beside patched",
        "",
        "Generated by `scripts/capture_rules_table.py` (do not edit). For every model file of a",
        "release that defines `set_eagle3_layers_to_capture` (found by parsing the files), every",
        "class of the file that has the method (its own, inherited, or delegating to an inner",
        "`self.model` / `self.language_model`) is called through the tree's own model-runner code",
        "(0.5.23: `resolve_spec_aux_hidden_state_config`, then `configure_aux_hidden_state_capture`",
        "with every parameter from the struct's field of that name; 0.5.9-0.5.11: `ModelRunner`'s",
        "EAGLE-3 block of `__init__`, then `init_aux_hidden_state_capture`) on a stand-in instance",
        "(`python/sglang_eagle_sizing/probes/capture_standin.py`: the class without its `__init__`, holding",
        "`config`, the last pipeline rank, and stand-ins of the inner classes its `__init__` builds,",
        f"with `layers` of L = {num_layers} empty modules). Cells: the `layers_to_capture` the call",
        "set, i.e. indices into transformers' `output_hidden_states` (0 = embeddings, k = output of",
        "layer k-1); `X → **Y**`: the released tree captures X, the patched Y; an exception name:",
        "the call raised it (`IndexError`: the class flags `layers[id]` and there is no such",
        "layer, a crash at start-up; `ValueError`: the tree's start-up refusal, raised by",
        "`configure_aux_hidden_state_capture` after the class's own rule); `refused`: the tree",
        "refused the drafter before the call (`CASES/`: the drafter folders the script",
        "writes in a scratch folder). The ids the runner",
        f"hands the class were resolved against a Llama target config of {num_layers} layers (the",
        "runner's resolution reads the drafter's config; the class's own rule is applied by its",
        "method). `forward captures L`: read from the source of the forward of the module that",
        "holds `layers_to_capture` (a membership test on something other than the layer loop's",
        "index, such as `self.end_layer`, captures the final hidden state); not run. The",
        "registered column: the class is in its file's `EntryClass`; a class that is not (an inner",
        "decoder stack) takes layer indices from its outer class. On a patched 0.5.23 tree each",
        "class is given what its own start-up would give it (layer ids, or hidden-state indices",
        "handed to its `set_eagle3_hidden_states_to_capture` as they are) and `refused` is",
        "`check_eagle3_capture`'s refusal for that class, before any weights load. `patched:",
        "declared`: whether the class declares its capture (`get_eagle3_layers_to_capture`, read",
        "from the config alone) and that answer equals what its `set_eagle3_layers_to_capture`",
        "captured in every case (`= capture`).",
        "",
    ]
    for family, results in families.items():
        lines += render_family(family, results, num_layers, timings[family]) + [""]
    # the drafter folders live in a scratch folder of another name each run
    return re.sub(r"/tmp/capture-rules-[A-Za-z0-9_]+/", "CASES/", "\n".join(lines))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=REPO / "docs" / "development" / "capture-rules.md"
    )
    parser.add_argument("--family", action="append", choices=sorted(ENVIRONMENTS))
    parser.add_argument(
        "--only", nargs="*", default=[], help="model files (stems) to probe"
    )
    parser.add_argument("--released-only", action="store_true")
    parser.add_argument(
        "--json", action="store_true", help="print the probes' results, write nothing"
    )
    parser.add_argument("--layers", type=int, default=NUM_LAYERS)
    args = parser.parse_args(argv)
    families, timings = {}, {}
    trees = ("released",) if args.released_only else ("released", "patched")
    with tempfile.TemporaryDirectory(prefix="capture-rules-") as scratch:
        cases = write_cases(Path(scratch), args.layers)
        for family in args.family or sorted(ENVIRONMENTS):
            start = time.monotonic()
            families[family] = probe_family(family, cases, args.only, trees)
            timings[family] = time.monotonic() - start
    if args.json:
        print(json.dumps(families))
        return 0
    args.out.write_text(render(families, args.layers, timings))
    for family, results in families.items():
        print(
            f"{family}: {len(results['released']['files'])} files, {len(results['released']['rows'])} classes, {timings[family]:.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
