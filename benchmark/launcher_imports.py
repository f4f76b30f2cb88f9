"""What the launcher imports while it resolves the speculative arguments of an EAGLE-3 pair,
SGLang 0.5.23 trees side by side: the model modules (``sglang.srt.models.*``), every module,
and the time ``handle_speculative_decoding`` takes, on a tiny DeepSeek-V3 target (6 layers)
with a drafter whose ``eagle_config`` ids are ``[1, 2, 5]`` (hidden state 6 by DeepSeek-V3's
rule: the last layer's output, which it does not capture).

    .venv/bin/python benchmark/launcher_imports.py NAME=TREE [NAME=TREE ...]

``TREE``: a checkout (its ``python/``) or a folder holding the ``sglang`` package, run with
``.venv-0.5.23``'s interpreter; e.g. ``released=/tmp/v0.5.23`` ``patched=/tmp/fork``. About
15 s a tree. Prints one table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv-0.5.23" / "bin" / "python"

PROBE = """
import json, sys, time
from sglang.srt.arg_groups.speculative_hook import handle_speculative_decoding
from sglang.srt.server_args import ServerArgs
args = ServerArgs(model_path=sys.argv[1], device="cpu", speculative_algorithm="EAGLE3",
                  speculative_draft_model_path=sys.argv[2], skip_tokenizer_init=True)
before = set(sys.modules)
start = time.perf_counter()
error = None
try:
    handle_speculative_decoding(args)
except ValueError as exc:
    error = str(exc).splitlines()[0]
seconds = time.perf_counter() - start
new = set(sys.modules) - before
print(json.dumps({
    "models": len([m for m in new if m.startswith("sglang.srt.models.")]),
    "modules": len(new), "seconds": seconds, "error": error,
}))
"""

TARGET = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 32,
    "kv_lora_rank": 256,
    "qk_rope_head_dim": 32,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "n_routed_experts": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "vocab_size": 512,
}
DRAFTER = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 512,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 5]},
}


def _python_path(tree: Path) -> Path:
    return tree / "python" if (tree / "python" / "sglang").is_dir() else tree


def measure(tree: Path, target: Path, drafter: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(_python_path(tree))}
    out = subprocess.run(
        [str(PYTHON), "-c", PROBE, str(target), str(drafter)],
        capture_output=True, text=True, env=env, check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    trees = [arg.split("=", 1) for arg in sys.argv[1:]]
    if not trees or any(len(t) != 2 for t in trees):
        sys.exit(__doc__.split("\n\n")[1])
    with tempfile.TemporaryDirectory(prefix="launcher-imports-") as scratch:
        folders = {}
        for name, config in (("target", TARGET), ("drafter", DRAFTER)):
            folders[name] = Path(scratch) / name
            folders[name].mkdir()
            (folders[name] / "config.json").write_text(json.dumps(config))
        rows = [(name, measure(Path(path), folders["target"], folders["drafter"]))
                for name, path in trees]
    print("| tree | model modules imported | modules imported | seconds | refused |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, row in rows:
        refused = "no" if row["error"] is None else f"yes: {row['error'][:80]}..."
        print(f"| {name} | {row['models']} | {row['modules']} | {row['seconds']:.1f} | {refused} |")
    first = rows[0][1]
    for name, row in rows[1:]:
        ratio = row["seconds"] / first["seconds"] if first["seconds"] else float("nan")
        print(f"seconds {name} / {rows[0][0]}: {ratio:.1f}")


if __name__ == "__main__":
    main()
