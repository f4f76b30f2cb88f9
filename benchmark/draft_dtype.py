"""What each way of reconciling a float16 drafter with a bfloat16 target costs, side by side.

The pair: the bundled llama3.1-8b EAGLE-3 pair (drafter ``torch_dtype: float16``, target
``bfloat16``); every shape comes from its two config.json files. The two choices of
docs/design.md ("One dtype for the hidden states"):

- **inherit**: the draft model is built in the target's dtype (what the patch does): its
  float16 checkpoint is rounded to bfloat16 when it loads, and nothing is cast while serving;
- **cast**: the draft model stays float16 and the target's bfloat16 hidden states are cast to
  float16 at the drafter's input, every step.

Printed: (1) precision of the drafter's first layer (``fc``: 3 x 4096 -> 4096, the layer that
reads the target's hidden states) under each choice against a float32 reference, and what the
cast does to a hidden state above float16's range; (2) memory each choice needs beyond the
draft weights; (3) the time of the per-step cast next to the ``fc`` matmul it feeds.

What is synthetic (no weights are downloaded here): the ``fc`` weights are drawn N(0, 0.02) in
float16 (the checkpoint's dtype), the target's hidden states N(0, 1) in bfloat16 with a few
large channels, as real LLM activations have. Timings are CPU timings (no GPU here: a GPU runs
other kernels, and under CUDA graphs the cast is one more captured kernel and buffer); they
compare the two operations on the same machine, interleaved, best of N.
"""

from __future__ import annotations

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from _common import REPO, machine

PAIR = REPO / "test" / "data" / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3"
#: SGLang's defaults for this target (``report``: auto_choose_speculative_params, ServerArgs)
CUDA_GRAPH_MAX_BS = 160
NUM_STEPS = 5


def config(name: str) -> dict:
    return json.loads((PAIR / name / "config.json").read_text())


def relative_error(got: torch.Tensor, reference: torch.Tensor) -> float:
    return float((got.float() - reference).norm() / reference.norm())


def best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    draft, target = config("draft"), config("target")
    assert (draft["torch_dtype"], target["torch_dtype"]) == ("float16", "bfloat16")
    width = target["hidden_size"]
    num_aux = len(draft.get("eagle_config", {}).get("eagle_aux_hidden_state_layer_ids") or [0] * 3)
    fc_in, fc_out = num_aux * width, draft["hidden_size"]
    print(f"machine: {machine()}")
    print(
        f"pair: {PAIR.name}: drafter float16, target bfloat16; fc {fc_in} -> {fc_out}, "
        f"vocab {target['vocab_size']}"
    )

    # (1) precision
    tokens = 64
    weight16 = (torch.randn(fc_out, fc_in) * 0.02).half()  # the checkpoint's values
    hidden = torch.randn(tokens, fc_in)
    hidden[:, torch.randperm(fc_in)[:8]] *= 300.0  # a few large channels
    hidden_bf16 = hidden.bfloat16()  # what the target produces
    reference = hidden_bf16.float() @ weight16.float().t()
    inherit = hidden_bf16 @ weight16.bfloat16().t()
    cast = hidden_bf16.half() @ weight16.t()
    print("\n(1) precision of the drafter's fc on the target's hidden states (vs float32)")
    print(f"  {'choice':<8} {'weights':<9} {'input':<9} {'rel. error':>11} {'weight rounding':>16}")
    weight_error = relative_error(weight16.bfloat16(), weight16.float())
    e_inherit, e_cast = relative_error(inherit, reference), relative_error(cast, reference)
    print(f"  {'inherit':<8} {'bfloat16':<9} {'bfloat16':<9} {e_inherit:>11.2e} {weight_error:>16.2e}")
    print(f"  {'cast':<8} {'float16':<9} {'float16':<9} {e_cast:>11.2e} {0.0:>16.2e}")
    print(f"  inherit / cast error: {e_inherit / e_cast:.1f}x")
    big = torch.tensor([70000.0, -1.0e5], dtype=torch.bfloat16)
    print(
        f"  a target hidden state of {big.tolist()} (bfloat16) cast to float16: "
        f"{big.half().tolist()} (float16's largest finite value is {torch.finfo(torch.float16).max:.0f})"
    )

    # (2) memory beyond the draft weights (which are 2 bytes a parameter either way)
    rows = CUDA_GRAPH_MAX_BS * (NUM_STEPS + 1)
    embedding = target["vocab_size"] * width * 2
    cast_buffer = rows * fc_in * 2
    print("\n(2) memory beyond the draft weights (2 bytes a parameter in both dtypes)")
    print(f"  {'what':<62} {'inherit':>10} {'cast':>12}")
    print(
        f"  {'a float16 copy of the shared bfloat16 embedding (vocab x hidden)':<62} "
        f"{mib(0):>10} {mib(embedding):>12}"
    )
    print(
        f"  {f'the cast output for the extend CUDA graph ({rows} x {fc_in})':<62} "
        f"{mib(0):>10} {mib(cast_buffer):>12}"
    )
    print(
        "  (or, instead of the copy, a second cast per step, of the embedding's output; "
        "EAGLE-1 and MTP drafters share the lm_head too: one more vocab x hidden copy or cast)"
    )

    # (3) the per-step cast next to the fc it feeds
    print("\n(3) per draft-extend step: the cast next to the fc matmul (CPU, best of 7)")
    print(f"  {'rows':>5} {'cast bf16->fp16':>16} {'fc (bfloat16)':>14} {'cast / fc':>10}")
    weight_bf16 = weight16.bfloat16()
    for rows_per_step in (NUM_STEPS + 1, 16 * (NUM_STEPS + 1), CUDA_GRAPH_MAX_BS):
        step = torch.randn(rows_per_step, fc_in).bfloat16()
        cast_time = fc_time = float("inf")
        for _ in range(7):  # interleaved
            cast_time = min(cast_time, best_of(lambda: step.half(), 1))
            fc_time = min(fc_time, best_of(lambda: step @ weight_bf16.t(), 1))
        print(
            f"  {rows_per_step:>5} {cast_time * 1e6:>13.0f} us {fc_time * 1e6:>11.0f} us "
            f"{cast_time / fc_time:>9.1%}"
        )


if __name__ == "__main__":
    main()
