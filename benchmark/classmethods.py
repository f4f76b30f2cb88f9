"""Cost per call of EagleDraftInput/EagleDraftExtendInput.hidden_size_for and dtype_for against
the inline attribute reads 0.5.11 used at the same sites, on the same objects.

Runs in a scratch copy of the installed SGLang, patched by this tool (never the installed one).
The worker objects are namespaces holding exactly what the classmethods read: the cost measured
is the classmethods' own Python, which is what the refactor adds."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from _common import TOOL, machine, run, scratch_copy

INNER = r"""
import json, timeit
from types import SimpleNamespace as NS
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

hf = NS(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 23, 44]}, name_or_path="d")
draft = NS(hidden_size=4096, spec_hidden_size=4096, dtype="bf16", hf_config=hf)
target = NS(hidden_size=4096, spec_hidden_size=4096, dtype="bf16", hf_config=NS())
v1 = NS(model_runner=NS(model_config=draft), target_worker=NS(model_config=target),
        speculative_algorithm=SpeculativeAlgorithm.EAGLE3, eagle_use_aux_hidden_state=True,
        model_config=draft)
cases = {
    "decode hidden_size_for(v1 worker)": (lambda: EagleDraftInput.hidden_size_for(v1),
        lambda: v1.model_runner.model_config.spec_hidden_size),
    "decode dtype_for(v1 worker)": (lambda: EagleDraftInput.dtype_for(v1),
        lambda: v1.model_runner.model_config.dtype),
    "extend hidden_size_for(EAGLE-3 with aux)": (lambda: EagleDraftExtendInput.hidden_size_for(v1),
        lambda: v1.model_config.hidden_size * 3),
    "extend dtype_for(v1 worker)": (lambda: EagleDraftExtendInput.dtype_for(v1),
        lambda: v1.model_runner.model_config.dtype),
}
out = {}
for name, (new, old) in cases.items():
    number = 200000
    t_new = min(timeit.repeat(new, number=number, repeat=5)) / number * 1e9
    t_old = min(timeit.repeat(old, number=number, repeat=5)) / number * 1e9
    out[name] = (t_new, t_old)
print(json.dumps(out))
"""

#: Rough decode step for scale: Llama-3.1-8B, batch 1, bf16 on one H100 reads ~16 GB of weights
#: per step at ~3 TB/s: ~5 ms (memory-bound lower bound; real steps with attention, sampling and
#: scheduling are ~6-10 ms). An estimate from the model size and the GPU's memory bandwidth,
#: not a measurement (this machine has no GPU).
DECODE_STEP_NS = 5e6


def main() -> None:
    import json

    root = scratch_copy()
    assert run([*TOOL, "apply", "-q", str(root / "sglang")]).returncode == 0
    env = dict(os.environ, PYTHONPATH=str(root))
    result = run([sys.executable, "-c", INNER], env=env, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    print(f"machine: {machine()}")
    print(
        f"{'call':44} {'classmethod':>12} {'inline 0.5.11':>14} {'ratio':>6}  per decode step (~5 ms)"
    )
    for name, (new, old) in json.loads(result.stdout).items():
        print(
            f"{name:44} {new:10.0f} ns {old:12.0f} ns {new / old:6.1f}  {new / DECODE_STEP_NS:.1e}"
        )
    print(
        "sizes are read at start-up (CUDA-graph buffers) and per idle batch, not per token"
    )


if __name__ == "__main__":
    main()
