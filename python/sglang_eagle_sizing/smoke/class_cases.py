"""Smoke cases served through the target's own class (issue 35, part 4).

One tiny target per class whose capture rule or architecture is not Llama's (``classes.py``:
built by transformers, layers random, the embedding and head of the ``shift`` craft), each
with two EAGLE-3 drafters: a SpecForge-style ``LlamaForCausalLMEagle3`` (ids in
``eagle_config``, SGLang's convention) and one in the speculators format (ids at the top level,
``output_hidden_states`` indices, written by the ``speculators`` library). The served tokens
must equal the run without speculation and transformers' ``generate``; the aux hidden states
the target captured are matched with transformers' ``output_hidden_states`` (``capture.py``)
and reported beside what the drafter's ids mean, on the patched tree and the unpatched release.

- ``qwen3-moe``: ``Qwen3MoeForCausalLM`` (4 experts, 2 per token, every layer sparse), whose
  ``set_eagle3_layers_to_capture`` delegates to its inner model (``val + 1``); 4 layers, ids
  ``[0, 1, 2]`` / speculators ``[1, 2, 3]``: hidden states 1, 2, 3 both;
- ``deepseek-v3``: ``DeepseekV3ForCausalLM`` (MLA, layer 0 dense, then 4 routed experts and a
  shared one), rule ``+ 1`` only if the first id is 1; 6 layers, ids ``[1, 2, 4]`` (hidden
  states 2, 3, 5 by either reading) / speculators ``[1, 3, 5]`` (the shape of a real
  ``[1, 30, 58]``: hidden-state indices whose first is 1, which no layer ids give under
  DeepSeek-V3's rule; handed to the class as they are);
- ``gpt-oss``: ``GptOssForCausalLM`` unquantized (4 experts, sliding and full attention
  alternating, attention sinks), rule: ids as given when the largest is ``num_hidden_layers``;
  4 layers, ids ``[1, 2, 4]`` ending at the final boundary / speculators ``[1, 2, 4]``, whose
  ``4`` (``L``) is the last layer's output before the final norm, as the speculators library's
  ``launch_vllm.py --include-last-layer`` asks vLLM for it;
- ``gemma3``: ``Gemma3ForCausalLM`` (text only), 4 layers, ids ``[0, 1, 2]`` / speculators
  ``[1, 2, 4]`` (its forward captures the final boundary too).
"""

from __future__ import annotations

from sglang_eagle_sizing.smoke.cases import CHAIN, LONG, V1, Case
from sglang_eagle_sizing.smoke.models import DrafterSpec, TargetSpec

#: short name -> (architecture, layers, SpecForge-style ids, speculators ids)
CLASSES = {
    "qwen3-moe": ("Qwen3MoeForCausalLM", 4, (0, 1, 2), (1, 2, 3)),
    "deepseek-v3": ("DeepseekV3ForCausalLM", 6, (1, 2, 4), (1, 3, 5)),
    "gpt-oss": ("GptOssForCausalLM", 4, (1, 2, 4), (1, 2, 4)),
    "gemma3": ("Gemma3ForCausalLM", 4, (0, 1, 2), (1, 2, 4)),
}
#: the run without speculation's attention backend where torch_native cannot serve the class:
#: MLA's extend reaches torch_native_backend.py's SDPA with the latent as the value
#: ("Expected size for first two dimensions of batch2 tensor to be: [4, 48] but got: [4, 288]",
#: 0.5.23 torch_native_backend.py:160 _run_sdpa_forward_extend); transformers' generate stays
#: the reference from another kernel. GPT-OSS refuses torch_native at start-up
#: ("GptOssForCausalLM requires one of ['triton', 'trtllm_mha', 'fa3', ...] attention backend")
PLAIN_BACKEND = {"deepseek-v3": "triton", "gpt-oss": "triton"}
#: flags of the target (the run without speculation keeps them too). GPT-OSS: SGLang's
#: ``auto`` MoE runner is ``triton_kernel`` on a CPU without AMX
#: (arg_groups/model_overrides/gpt_oss.py), whose transposed expert layout refuses the
#: checkpoint's experts at load ("The size of tensor a (64) must match the size of tensor b
#: (128) at non-singleton dimension 1", fused_moe_triton/layer.py:879 ``_load_w13``); the
#: ``triton`` runner loads them and serves. Its context (131072, the real checkpoints' YaRN)
#: is cut to the drafter's 1024, which SGLang otherwise refuses ("Target model's
#: context_length (131072) is greater than the derived context_length (1024)")
TARGET_FLAGS = {"gpt-oss": ("--moe-runner-backend", "triton", "--context-length", "1024")}
#: classes SGLang 0.5.11 has too (every one above: 0.5.11 ships qwen3_moe.py, deepseek_v2.py,
#: gpt_oss.py and gemma3_causal.py)
STYLES = ("specforge", "speculators")


def class_case(short: str, style: str, worker: str) -> Case:
    """The case of class ``short`` (``CLASSES``) with a drafter of ``style`` (``STYLES``),
    served with the ``v1`` (0.5.11's ``--disable-overlap-schedule``) or ``v2`` worker."""
    architecture, layers, sglang_ids, speculators_ids = CLASSES[short]
    target = TargetSpec(architecture=architecture, num_layers=layers)
    if style == "specforge":
        drafter = DrafterSpec(kind="eagle3", aux_layer_ids=sglang_ids)
        what = f"SpecForge-style LlamaForCausalLMEagle3, eagle_config ids {list(sglang_ids)}"
    else:
        drafter = DrafterSpec(
            kind="eagle3", aux_layer_ids=speculators_ids, ids_at="top", format="speculators"
        )
        what = f"speculators-format drafter, ids {list(speculators_ids)}"
    return Case(
        f"{short}-eagle3-{style}-{worker}",
        f"EAGLE-3 on a tiny {architecture} target ({layers} layers, served through its own "
        f"class), {what}; {worker} worker",
        "EAGLE3",
        drafter,
        CHAIN + (V1 if worker == "v1" else ()),
        batches=(LONG,),
        target=target,
        release_error=None,
        compare_capture=True,
        plain_attention_backend=PLAIN_BACKEND.get(short, "torch_native"),
        target_flags=TARGET_FLAGS.get(short, ()),
    )


def class_cases(worker: str) -> tuple[Case, ...]:
    return tuple(class_case(short, style, worker) for short in CLASSES for style in STYLES)

