"""Generate docs/development/captured-tensors.md: for every SGLang model class that captures
EAGLE-3 aux hidden states, which tensor each captured chunk is, per release family, released
tree beside patched tree, computed by running the class itself on a CPU against transformers'
hidden states of the same weights (``python/sglang_eagle_sizing/probes/captured_tensor_probe.py``,
run in the family's environment).

    .venv/bin/python scripts/captured_tensors_table.py [--out docs/development/captured-tensors.md]
        [--data python/sglang_eagle_sizing/data/captured_tensors.json]
    .venv/bin/python scripts/captured_tensors_table.py --json --family 0.5.23 \\
        --only llama:LlamaForCausalLM gemma3_causal:Gemma3ForCausalLM
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "python/sglang_eagle_sizing/probes/captured_tensor_probe.py"
MARK, START, DONE = (
    "CAPTURED-TENSORS ",
    "CAPTURED-TENSORS-START ",
    "CAPTURED-TENSORS-DONE ",
)
CLASSES = "CAPTURED-TENSORS-CLASSES "
IMPORT = "import of the model file"
NUM_LAYERS = 4
#: family -> the environment holding its release
ENVIRONMENTS = {"0.5.11": REPO / ".venv", "0.5.23": REPO / ".venv-0.5.23"}
TREES = ("released", "patched")


# -- running the probe ----------------------------------------------------------------------
def probe_env(root: Path) -> dict:
    """The environment of a probe of the ``sglang`` in ``root`` on the CPU: the tree first on
    the path, SGLang's CPU engine, the CUDA driver stub (``sgl_kernel``'s extension links it),
    Triton's interpreter, nothing from a hub."""
    sys.path.insert(0, str(REPO / "python"))
    from sglang_eagle_sizing.caches import default_cache_dir
    from sglang_eagle_sizing.smoke.server import libcuda_stub

    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p
        for p in (str(libcuda_stub(default_cache_dir())), env.get("LD_LIBRARY_PATH"))
        if p
    )
    env.update(
        SGLANG_USE_CPU_ENGINE="1",
        TRITON_INTERPRET="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
    )
    return env


def run_probe(python: Path, root: Path, scratch: Path, only: list, layers: int) -> dict:
    """``{"version", "files", "rows"}`` of the probe run on the tree in ``root``; a class
    that kills the process gets a row saying so, and the rest run in a new process."""
    rows: list[dict] = []
    done = None
    skip: list = []
    while done is None:
        spec = scratch / f"spec-{len(skip)}.json"
        spec.write_text(
            json.dumps(
                {
                    "scratch": str(scratch),
                    "layers": layers,
                    "only": only,
                    "skip": skip + [[r["file"], r["class"]] for r in rows],
                }
            )
        )
        run = subprocess.run(
            [str(python), str(PROBE), str(spec)],
            env=probe_env(root),
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
        )
        current = None
        for line in run.stdout.splitlines():
            if line.startswith(START):
                current = json.loads(line[len(START) :])
            elif line.startswith(MARK):
                rows.append(json.loads(line[len(MARK) :]))
                current = None
            elif line.startswith(DONE):
                done = json.loads(line[len(DONE) :])
        if done is None:
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            if current is None:
                raise RuntimeError(f"{python} could not probe {root}: {last}")
            skip.append([current["file"], current["class"]])
            rows.append(
                {
                    **current,
                    "status": "error",
                    "stage": "the probe's process",
                    "error": f"the process ended with {run.returncode}: {last}",
                }
            )
    return {**done, "rows": expand_unimported(python, root, scratch, rows)}


def expand_unimported(python: Path, root: Path, scratch: Path, rows: list) -> list:
    """Rows of a model file the CPU engine cannot import name only the classes that define
    the method in it (read from its source); the classes it has when imported without the
    CPU engine (inherited methods too) each get the row."""
    files = sorted({r["file"] for r in rows if r.get("stage") == IMPORT})
    if not files:
        return rows
    env = probe_env(root)
    env.pop("SGLANG_USE_CPU_ENGINE")
    run = subprocess.run(
        [str(python), str(PROBE), "--list", *files],
        env=env,
        cwd=scratch,
        capture_output=True,
        text=True,
        check=False,
    )
    listed = next(
        (
            json.loads(line[len(CLASSES) :])
            for line in run.stdout.splitlines()
            if line.startswith(CLASSES)
        ),
        {},
    )
    out, seen = [], set()
    for row in rows:
        if row.get("stage") != IMPORT or not listed.get(row["file"]):
            out.append(row)
            continue
        if row["file"] in seen:
            continue
        seen.add(row["file"])
        for name, registered in listed[row["file"]]:
            expanded = {**row, "class": name, "registered": registered}
            if not registered:
                expanded = {
                    k: v for k, v in expanded.items() if k not in ("stage", "error")
                }
                expanded["status"] = "inner"
            out.append(expanded)
    return out


def probe_family(family: str, only: list, layers: int, trees=TREES) -> dict:
    """{tree: probe result} for the family's installed release and the patch applied to a
    scratch copy of it (``report.release_0_5_23.both_trees``, as capture_rules_table.py).
    """
    sys.path.insert(0, str(REPO / "python"))
    from sglang_eagle_sizing.report.release_0_5_23 import both_trees
    from sglang_eagle_sizing.tree import SglangTree

    venv = ENVIRONMENTS[family]
    python = venv / "bin/python"
    package = next((venv / "lib").glob("python3*/site-packages/sglang"))
    results = {}
    if "patched" not in trees:  # the installed release alone: no patched copy to make
        return {"released": probe_tree(python, package.parent, only, layers, package)}
    tree = SglangTree.locate(str(package), allow_untested_version=True)
    with both_trees(tree) as (released_root, patched_root, _origin):
        roots = {"released": released_root, "patched": patched_root}
        for name in trees:  # one at a time: the machine's two cores are shared
            results[name] = probe_tree(python, roots[name], only, layers, package)
    return results


def probe_tree(
    python: Path, root: Path, only: list, layers: int, package: Path
) -> dict:
    with tempfile.TemporaryDirectory(prefix="captured-tensors-") as scratch:
        start = time.monotonic()
        result = run_probe(python, root, Path(scratch), only, layers)
        result["seconds"] = time.monotonic() - start
    return scrub(result, [root, scratch, package.parent])


def scrub(value, roots):
    """``value`` without this machine's paths (the tree's, the scratch folder's)."""
    text = json.dumps(value)
    for root in roots:
        text = text.replace(str(root).rstrip("/") + "/", "").replace(str(root), ".")
    text = re.sub(r"/tmp/[A-Za-z0-9_./-]+", "TMP", text)
    return json.loads(text)


# -- the table ------------------------------------------------------------------------------
def decade(err: float | None) -> str:
    """The error as the power of ten above it (stable across machines, unlike its digits)."""
    if err is None or math.isnan(err):
        return "?"
    if err <= 0:
        return "0"
    return f"< 1e{math.floor(math.log10(err)) + 1:+03d}"


def chunk_text(chunk: dict) -> str:
    if chunk["is"] in ("k", "L-pre"):
        return f"{chunk['index']}: {chunk['is']}"
    nearest = chunk.get("nearest")
    if nearest is None:
        return f"{chunk['index']}: none"
    if nearest.isdigit():
        nearest = f"k={nearest}"
    return f"{chunk['index']}: none: nearest {nearest} (max err {decade(chunk['err'])})"


def cell(row: dict | None) -> str:
    """What the class captured, one entry per chunk, or what stopped it."""
    if row is None:
        return "-"
    status = row["status"]
    if status == "inner":
        return "inner stack: takes layer indices from its outer class (row of the outer class)"
    if status == "no-transformers":
        return "not run: transformers has no class of this name"
    if status == "error":
        return f"**stopped** ({row['stage']}): {row['error']}".replace("|", "\\|")
    chunks = ", ".join(chunk_text(c) for c in row["chunks"])
    if row.get("chunk_count_mismatch"):
        chunks += f" (chunks {row['chunk_count_mismatch'][0]} for {row['chunk_count_mismatch'][1]})"
    return chunks or "no chunk"


def verdict(row: dict | None) -> str:
    """``k`` when every chunk is the hidden state its index names, else the first other."""
    if row is None or row["status"] != "ran":
        return "-"
    others = [c for c in row["chunks"] if c["is"] == "none"]
    if not others:
        return "k" + (
            " + L-pre" if any(c["is"] == "L-pre" for c in row["chunks"]) else ""
        )
    nearest = {c.get("nearest") or "" for c in others}
    if all(n.startswith("mlp-branch") for n in nearest):
        return "**none: mlp-branch**"
    if all(c.get("nearest") == str(c["index"]) for c in others):
        return "**none: nearest k** (arithmetic differs)"
    return "**none**"


def indices(row: dict | None) -> str:
    if row is None or "layers_to_capture" not in row:
        return "-"

    def compact(values):
        return "[" + ",".join(str(v) for v in values) + "]"

    captured = [c["index"] for c in row.get("chunks", [])]
    return (
        f"`{compact(row['ids'])}` → `{compact(row['layers_to_capture'])}`; "
        f"chunks for `{compact(captured)}`"
    )


def path_text(row: dict | None) -> str:
    if row is None or row["status"] in ("inner", "no-transformers"):
        return "-"
    parts = []
    if row.get("server_attention_backend"):
        parts.append(
            f"in-process, `get_model` with `{row['server_attention_backend']}`"
        )
    for refused in row.get("load_refused", []):
        parts.append(f"refused {refused}".replace("|", "\\|"))
    shorter = [a.split(": ", 1) for a in row.get("attempts", [])]
    if row["status"] == "ran" and shorter:
        parts.append(
            "longer id lists raised: "
            + "; ".join(f"{ids} {why}" for ids, why in shorter).replace("|", "\\|")
        )
    elif row["status"] == "error" and len(shorter) > 1:
        parts.append(
            "tried: "
            + "; ".join(f"{ids}: {why}" for ids, why in shorter).replace("|", "\\|")
        )
    return "; ".join(parts) or "-"


def render_family(family: str, results: dict) -> list[str]:
    released, patched = results["released"], results["patched"]
    other = {(r["file"], r["class"]): r for r in patched["rows"]}
    counts: dict[str, int] = {}
    for row in released["rows"]:
        key = verdict(row) if row["status"] == "ran" else row["status"]
        counts[key] = counts.get(key, 0) + 1
    lines = [
        (
            f"## SGLang {released['version']} ({family} family): "
            f"{len(released['rows'])} classes in {len(released['files'])} model files"
        ),
        "",
        f"Probed in {released['seconds']:.0f} s (released) and {patched['seconds']:.0f} s "
        "(patched). Released tree, by verdict: "
        + ", ".join(f"{k.replace('*', '')}: {v}" for k, v in sorted(counts.items()))
        + ".",
        "",
        (
            "| file | class | transformers class | ids → `layers_to_capture`; chunks for | "
            "released: each chunk | patched: each chunk | verdict (released → patched) | path |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in released["rows"]:
        twin = other.get((row["file"], row["class"]))
        now, then = cell(row), cell(twin)
        before, after = verdict(row), verdict(twin)
        lines.append(
            f"| {row['file']} | {row['class']} | {row.get('transformers_class', '-')} | "
            f"{indices(row)} | {now} | {'same' if then == now else then} | "
            f"{before if before == after else f'{before} → {after}'} | {path_text(row)} |"
        )
    return lines


def render(families: dict, layers: int, seconds: float) -> str:
    lines = [
        "# EAGLE-3 captured tensors per model class, released beside patched",
        "",
        (
            "Generated by `scripts/captured_tensors_table.py` (do not edit; about "
            f"{seconds / 60:.0f} minutes on two shared cores). Which tensor each EAGLE-3 aux "
            "hidden"
        ),
        "state chunk of a class is: for every class of a release's model files that has",
        "`set_eagle3_layers_to_capture` (as `capture-rules.md` finds them), a tiny instance of",
        f"its architecture ({layers} layers, width 64, 4 heads, 4 experts where it has experts,",
        "float32, seeded random weights) is built by transformers (`save_pretrained`), loaded",
        "into SGLang's own class by SGLang's own loader on the CPU (`get_model`, in one",
        "process, after the parallel state is initialised for one CPU process as the model",
        "runner does), and the class's own `set_eagle3_layers_to_capture` is called with",
        f"SGLang-format ids for the whole depth (`[0..{layers}]`; when the call or the prefill",
        f"raises, `[0..{layers - 1}]`, then `[0..{layers - 2}]`). One prefill of 8 tokens runs",
        "through the class's `forward`; the `aux_hidden_states` its `LogitsProcessor` is",
        "handed are the chunks. Attention runs in the probe's `EagerAttention` (causal softmax",
        "attention with the layer's own scaling, heads, window, logit cap and sinks) instead",
        "of a serving backend; everything else is the class's code and SGLang's CPU kernels.",
        "The patched column runs the same probe on the patch applied to a scratch copy of",
        "the release (as `capture_rules_table.py`). The same results, per class, are `report`'s",
        "(`python/sglang_eagle_sizing/data/captured_tensors.json`, written with this table).",
        "",
        "**Convention** (vLLM / speculators): hidden-state index `k` is the output of layer",
        "`k - 1` before the final norm (0: the embeddings), transformers'",
        f"`output_hidden_states[k]` for `k < L`; index `L` (= `num_hidden_layers`, {layers}",
        "here) is the last layer's output before the final norm (`L-pre`, taken with a forward",
        "hook on transformers' last decoder layer: its `hidden_states[L]` is after the norm and",
        "is not the reference). A chunk for index `i` is `k` (or `L-pre`) when its largest",
        "absolute difference from that reference is below 1e-4 of the reference's RMS (float32",
        "kernels differ by about 1e-6); else `none: nearest X (max err E)`, X the closest of",
        "every reference: `k=j`, `L-pre`, or `mlp-branch-j` (layer `j`'s branch without the",
        "residual: its `post_feedforward_layernorm`'s output where it has one, else its MLP's),",
        "E its relative error as a power of ten above it.",
        "",
        "Columns: `ids → layers_to_capture; chunks for`: the ids the probe passed, the",
        "indices the class's rule set, and the indices the chunks were paired with (in layer",
        "order; an index past `L`, or `L` where the forward does not capture the final",
        "boundary, gets no chunk). Verdict `k`: every chunk is its hidden state;",
        "`none: mlp-branch`: the chunks are the layers' MLP branches without the residual;",
        "`none: nearest k (arithmetic differs)`: each chunk is closest to the right hidden",
        "state but farther than float32 noise (the class computes the layer otherwise than",
        "transformers; not another tensor). `stopped`: what stopped the class on the CPU, the",
        "exception and where SGLang's code raised it (or called what did). Path: the server",
        "arguments SGLang's loader read (`torch_native` is SGLang's CPU default; a class that",
        "refuses it gets `triton` with each MoE runner).",
        "",
    ]
    for family, results in families.items():
        lines += render_family(family, results) + [""]
    lines += NOTES
    return "\n".join(lines)


#: what the rows above mean, read off them and the code they name (written by hand: check them
#: when a row changes)
NOTES = [
    "## Notes",
    "",
    "- **Gemma-3** (`gemma3_causal.Gemma3ForCausalLM`, `gemma3_mm.Gemma3ForConditionalGeneration`,",
    "  0.5.23): each chunk equals, to float32 noise, the previous layer's MLP branch after its",
    "  `post_feedforward_layernorm`, without the residual, not a hidden state (the model keeps",
    "  `hidden_states` and `residual` apart and captures `hidden_states`; upstream PR #39286);",
    "  the final boundary `L` is the last layer's branch too. A drafter trained on the",
    "  residual stream (SpecForge) gets other inputs than it was trained on. 0.5.11's Gemma-3",
    "  files define no `set_eagle3_layers_to_capture`.",
    "- **Gemma-4** (`gemma4_mm`) captures the hidden states, and the final boundary as `L-pre`.",
    "- **Apertus**: every chunk is nearest its own hidden state and far from every other, but",
    "  1e-3 to 1e-2 of the RMS off: SGLang's `XIELU` (`layers/activation.py`) holds its",
    "  `alpha_p`, `alpha_n`, `beta`, `eps` in bfloat16 and takes their softplus in bfloat16,",
    "  where transformers computes in float32. The arithmetic differs, not the tensor.",
    "- **ExaoneMoE**: `exaone_moe.py` reads `config.rope_theta` (fallback 1e6); transformers 5",
    "  keeps it in `rope_parameters` only, so with transformers 5 SGLang rotates at 1e6",
    "  whatever the checkpoint says. The tiny model uses 1e6 so that the chunks compare.",
    "- Classes that refuse SGLang's CPU default attention backend (`torch_native`: GPT-OSS,",
    "  ExaoneMoE, Gemma-4) are loaded with `triton` (the probe's attention replaces it).",
    "- What stops the others (each row's exception): the DSA classes",
    "  (`DeepseekV32ForCausalLM`, `GlmMoeDsaForCausalLM`, `Glm5NextForConditionalGeneration`)",
    "  ask `torch.cuda.get_device_capability()` in the server's model adjustments (to pick",
    "  DSA's KV-cache dtype and backends), before any weight; Qwen3-Next (0.5.23) builds its",
    "  gated norm on `torch.get_device_module().current_device()` (CUDA) in `__init__`, and on",
    "  0.5.11 its linear-attention layers call the hybrid GDN backend, which the probe's",
    "  `EagerAttention` does not provide (this probe's limit, not the CPU's); Qwen3.5's model",
    "  files import `sgl_kernel`'s `fused_sigmoid_mul_cpu`, which PyPI's CPU `sglang-kernel`",
    "  lacks; MiniMax-M2's q/k norm (`use_qk_norm`, on in its checkpoints) is a Triton kernel",
    "  whose wrapper asserts CUDA tensors; Llama-4's MoE applies the router weight on the",
    "  input, which SGLang's native (CPU) MoE does not implement; Gemma-4's text class reads",
    "  `config.head_dim`, which transformers 5.19 refuses for Gemma-4 (a per-layer",
    "  attribute); Longcat-Flash's own config class fails under transformers 5",
    "  (`max_position_embeddings` read during `PretrainedConfig.__init__`); GPT-OSS on 0.5.11:",
    "  neither MoE runner loads transformers' unquantized experts. MiniMax-M3-VL stops at",
    "  building the tiny model (its transformers class's config class is `AutoConfig`): not",
    "  tried further.",
    "- `not run: transformers has no class of this name`: the architecture has no",
    "  transformers implementation in that environment (remote code or SGLang-only), so",
    "  there is no reference.",
    "",
]


# -- the audit as data (report reads it: report/captured_tensors.py) ------------------------
#: what each verdict says of the tensor a class hands on (``audit_data``)
TENSORS = {
    "k": "hidden-states",
    "k + L-pre": "hidden-states",
    "**none: mlp-branch**": "mlp-branch",
    "**none: nearest k** (arithmetic differs)": "hidden-states-arithmetic-differs",
    "**none**": "other",
}


def audited(row: dict | None) -> dict:
    """One class on one tree: ``tensor`` (a ``TENSORS`` value; None: not run) and why not."""
    if row is None:
        return {"tensor": None, "why": "not probed on this tree"}
    if row["status"] == "ran":
        return {"tensor": TENSORS[verdict(row)]}
    if row["status"] == "inner":
        return {"tensor": None, "why": "an inner stack, probed through its outer class"}
    if row["status"] == "no-transformers":
        return {"tensor": None, "why": "transformers has no class of this name to compare with"}
    return {"tensor": None, "why": f"stopped on the CPU ({row['stage']}): {row['error'][:200]}"}


def audit_data(families: dict, layers: int) -> dict:
    """``{"releases": {version: {class: [{"file", "released", "patched"}, ...]}}}``: per
    release, per class (a name two model files define has two entries), ``audited`` on each
    tree."""
    releases = {}
    for results in families.values():
        patched = {(r["file"], r["class"]): r for r in results["patched"]["rows"]}
        classes: dict[str, list] = {}
        for row in results["released"]["rows"]:
            classes.setdefault(row["class"], []).append(
                {
                    "file": row["file"],
                    "released": audited(row),
                    "patched": audited(patched.get((row["file"], row["class"]))),
                }
            )
        releases[results["released"]["version"]] = classes
    return {
        "about": (
            "Generated by scripts/captured_tensors_table.py with "
            "docs/development/captured-tensors.md (do not edit): which tensor each class "
            f"hands an EAGLE-3 drafter, a tiny {layers}-layer instance run on the CPU against "
            "transformers' output_hidden_states of the same weights."
        ),
        "releases": releases,
    }


# -- reading the committed table back (the test compares rows) --------------------------------
def table_rows(text: str) -> dict:
    """{(family, file, class): (released cell, patched cell, verdict)} of a generated table."""
    found, family = {}, None
    for line in text.splitlines():
        heading = re.match(r"## SGLang \S+ \((\S+) family\)", line)
        if heading:
            family = heading.group(1)
            continue
        if (
            family
            and line.startswith("| ")
            and not line.startswith(("| file", "| ---"))
        ):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            found[(family, cells[0], cells[1])] = (cells[4], cells[5], cells[6])
    return found


def rows_of(family: str, results: dict) -> dict:
    """The same triples for freshly probed rows (rendered as the table renders them)."""
    lines = render_family(family, results)
    return {
        key: value
        for key, value in table_rows(
            "\n".join([f"## SGLang x ({family} family)", *lines[1:]])
        ).items()
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "docs" / "development" / "captured-tensors.md",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=REPO / "python" / "sglang_eagle_sizing" / "data" / "captured_tensors.json",
        help="the audit as data, for report (written with --out)",
    )
    parser.add_argument("--family", action="append", choices=sorted(ENVIRONMENTS))
    parser.add_argument(
        "--only", nargs="*", default=[], help="FILE:CLASS pairs to probe (default: all)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the probes' results, write nothing"
    )
    parser.add_argument("--layers", type=int, default=NUM_LAYERS)
    args = parser.parse_args(argv)
    only = [pair.split(":", 1) for pair in args.only]
    start = time.monotonic()
    families = {
        family: probe_family(family, only, args.layers)
        for family in args.family or sorted(ENVIRONMENTS)
    }
    seconds = time.monotonic() - start
    if args.json:
        print(json.dumps(families))
        return 0
    args.out.write_text(render(families, args.layers, seconds))
    args.data.write_text(json.dumps(audit_data(families, args.layers), indent=1) + "\n")
    for family, results in families.items():
        print(f"{family}: {len(results['released']['rows'])} classes")
    print(f"{seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
