"""The smoke cases of SGLang 0.5.23 (the release family after upstream's refactor).

Named as 0.5.11's (``cases.py``) with ``-v2`` only: 0.5.23 has no v1 workers (on a CPU its v2
workers run with the overlap scheduler off, ``speculative_hook.py``). Each is served from the
tree with ``.venv-0.5.23``'s interpreter and 0.5.23's own stand-ins
(``standins_0_5_23/sitecustomize.py``), and from the unpatched 0.5.23 release beside it.

Every case must serve from the patched tree; ``release_error`` is the error unpatched 0.5.23
fails with where it does (a case that fails patched would carry ``known_failure`` and its
``known_error``). Any other failure is a failure.
"""

from __future__ import annotations

from dataclasses import replace

from sglang_eagle_sizing.smoke.cases import (
    CHAIN,
    DP_ATTENTION,
    EAGLE3,
    FC_SHAPE,
    FOUR_IDS,
    MIRRORED_DTYPES,
    ONE,
    PD_FLAGS,
    QWEN3,
    SHAPES,
    SPECULATORS_4IDS,
    Case,
)
from sglang_eagle_sizing.smoke.class_cases import class_cases
from sglang_eagle_sizing.smoke.models import DrafterSpec

#: 0.5.23 ignores top-level ids in the target's capture and captures its default layers
#: (``[2, 2, 1]`` on the 4-layer target, two distinct): ``fc`` gets 128 features for 192
CAPTURE_IGNORES_TOP_LEVEL_IDS = "mat1 and mat2 shapes cannot be multiplied"
#: 0.5.23 builds a drafter at --dtype auto in its own dtype: the target's float16 states reach
#: the bfloat16 ``fc`` (``llama_eagle3.py``)
DTYPE_AT_FC = "c10::Half != c10::BFloat16"
#: the decode server of a PD pair on this CPU: 0.5.23 infers ``host_pool``, whose host pool
#: registers pinned memory through CUDA
RETRACTION_ON_CPU = ("--disaggregation-decode-retraction-backup", "cpu_tensor")
#: DP attention on this CPU: one OpenMP thread per rank, no NCCL (``cases.DP_ENV`` without
#: 0.5.11's DP stand-ins, which this release's file does not have)
DP_ENV = (
    ("SGLANG_CPU_OMP_THREADS_BIND", "0|1"),
    ("SGLANG_NCCL_SO_PATH", "/nonexistent/libnccl.so.2"),
)
#: unpatched 0.5.23 under DP attention: the idle rank's padded verify batch reaches the Triton
#: backend, which reads the idle EagleVerifyInput's kv_indptr (triton_backend.py:891)
IDLE_VERIFY_WITHOUT_KV_INDPTR = "'EagleVerifyInput' object has no attribute 'kv_indptr'"
#: unpatched 0.5.23, STANDALONE under PD: no draft proposal crosses, and the decode server's
#: draft runs on 0 tokens (the CPU's rotary embedding fails first)
DRAFT_FROM_NO_ROWS = "cannot reshape tensor of 0 elements"

CASES: tuple[Case, ...] = (
    Case(
        "eagle3-v2",
        "EAGLE-3, ids in eagle_config, v2 worker; all request shapes",
        "EAGLE3", EAGLE3, CHAIN, batches=SHAPES,
    ),
    Case(
        "eagle3-toplevel-ids-v2",
        "EAGLE-3 drafter declaring eagle_aux_hidden_state_layer_ids at the top level "
        "(vLLM's key: hidden-state indices [1, 2, 3]), v2 worker; unpatched 0.5.23's "
        "capture ignores them",
        "EAGLE3",
        DrafterSpec(kind="eagle3", aux_layer_ids=(1, 2, 3), ids_at="top"),
        CHAIN,
        release_error=CAPTURE_IGNORES_TOP_LEVEL_IDS,
    ),
    replace(
        FOUR_IDS,
        name="eagle3-4ids-v2",
        description="SpecForge-style LlamaForCausalLMEagle3 with 4 layer ids in eagle_config "
        "([0, 1, 2, 3]) on a 6-layer target, crafted so that drafts are accepted only from "
        "those 4 layers; v2 worker (every rule of unpatched 0.5.23 reads eagle_config's ids)",
        flags=CHAIN,
        release_error=None,
    ),
    replace(
        FOUR_IDS,
        name="eagle3-4ids-toplevel-v2",
        description="the same drafter with its 4 ids at the top level (vLLM's key: the "
        "hidden-state indices [1, 2, 3, 4] of the same layers); v2 worker (unpatched 0.5.23 "
        "sizes fc for 3 layers and captures its default 3)",
        drafter=replace(FOUR_IDS.drafter, aux_layer_ids=(1, 2, 3, 4), ids_at="top"),
        flags=CHAIN,
        release_error=FC_SHAPE,
    ),
    Case(
        "standalone-v2",
        "STANDALONE: a one-layer ordinary Llama drafting, v2 worker",
        "STANDALONE", DrafterSpec(kind="standalone"), CHAIN,
    ),
    Case(
        "eagle-v2",
        "EAGLE (an EAGLE-1 LlamaForCausalLMEagle drafter), v2 worker",
        "EAGLE", DrafterSpec(kind="eagle"), CHAIN,
    ),
    replace(
        MIRRORED_DTYPES,
        name="eagle3-bf16-drafter-fp16-target-v2",
        description="EAGLE-3, bfloat16 drafter on a float16 target at --dtype auto (the "
        "Llama-3.1-8B SpecForge pair's mismatch, mirrored: no bfloat16 model serves on this "
        "CPU), v2 worker",
        flags=CHAIN,
        release_error=DTYPE_AT_FC,
    ),
    Case(
        "eagle3-dp-attention-v2",
        "EAGLE-3, Qwen3 target, --tp 2 --dp 2 --enable-dp-attention, one request (rank dp1 "
        "idle), v2 worker",
        "EAGLE3", EAGLE3, CHAIN + DP_ATTENTION, batches=(ONE,), target=QWEN3, env=DP_ENV,
        release_error=IDLE_VERIFY_WITHOUT_KV_INDPTR,
    ),
    Case(
        "eagle3-pd-v2",
        "EAGLE-3, PD disaggregation (a prefill and a decode server, Mooncake over TCP on "
        "loopback), v2 worker",
        "EAGLE3", EAGLE3, CHAIN + PD_FLAGS, batches=SHAPES, pd=True,
        decode_flags=RETRACTION_ON_CPU,
    ),
    Case(
        "standalone-pd-v2",
        "STANDALONE under PD disaggregation, v2 worker (unpatched 0.5.23's prefill server "
        "sends no draft proposal, its decode server drafts from a zero-row input)",
        "STANDALONE", DrafterSpec(kind="standalone"), CHAIN + PD_FLAGS, pd=True,
        decode_flags=RETRACTION_ON_CPU,
        release_error=DRAFT_FROM_NO_ROWS,
    ),
    replace(
        SPECULATORS_4IDS,
        name="eagle3-speculators-4ids-v2",
        description=SPECULATORS_4IDS.description.replace("v1 worker", "v2 worker"),
        flags=CHAIN,
    ),
    replace(
        SPECULATORS_4IDS,
        name="eagle3-speculators-3ids-v2",
        description="EAGLE-3 drafter in the speculators format (norm_before_fc) with 3 layer "
        "ids at the top level ([1, 3, 4]: the hidden states output_hidden_states[1, 3, 4] of "
        "transformers, SGLang's [0, 2, 3]) on a 6-layer target, crafted so that drafts are "
        "accepted only from those 3; v2 worker",
        drafter=replace(SPECULATORS_4IDS.drafter, aux_layer_ids=(1, 3, 4)),
        flags=CHAIN,
    ),
)

#: served through the target's own class: Qwen3-MoE, DeepSeek-V3, GPT-OSS, Gemma-3
CASES += class_cases("v2")

#: what CI serves of 0.5.23 (test/test_smoke_0_5_23.py): one case, from the patched tree only
CI_CASES = ("eagle3-v2",)
