"""The smoke cases of SGLang 0.5.9-0.5.11: each served from the patched tree and from the
release beside it (``smoke --compare``), on the CPU. The cases both families serve are
``smoke/cases.py``'s; this list names them with the v1 (``--disable-overlap-schedule``) and v2
workers 0.5.11 has, and adds its own.
"""

from __future__ import annotations

from dataclasses import replace

from sglang_eagle_sizing.smoke.cases import (
    CHAIN,
    DP_ATTENTION,
    DP_ENV,
    DP_NARROW,
    DP_NARROW_4,
    DP_ONE_REQUEST,
    DP_THREE_REQUESTS,
    EAGLE3,
    FOUR_IDS,
    LAYERED,
    LONG,
    MIRRORED_DTYPES,
    MTP,
    ONE,
    PD,
    PD_FLAGS,
    QWEN3,
    SHAPES,
    SPECULATORS_4IDS,
    SPECULATORS_UNREAD,
    V1,
    Case,
)
from sglang_eagle_sizing.families.release_0_5_11.sites import Kind, Site
from sglang_eagle_sizing.smoke.class_cases import class_cases
from sglang_eagle_sizing.smoke.models import DrafterSpec, TargetSpec

CASES: tuple[Case, ...] = (
    Case(
        "eagle3-v1",
        "EAGLE-3, v1 worker (--disable-overlap-schedule), ids in eagle_config; all request shapes",
        "EAGLE3", EAGLE3, CHAIN + V1, batches=SHAPES,
    ),
    Case(
        "eagle3-v2",
        "EAGLE-3, v2 (overlap) worker",
        "EAGLE3", EAGLE3, CHAIN, batches=SHAPES,
    ),
    Case(
        "eagle3-noaux-v1",
        "EAGLE-3 drafter with eagle_config.use_aux_hidden_state: false (target's last hidden state)",
        "EAGLE3",
        DrafterSpec(kind="eagle3", aux_layer_ids=None, use_aux_hidden_state=False),
        CHAIN + V1,
    ),
    Case(
        "eagle3-toplevel-ids-v1",
        "EAGLE-3 drafter declaring eagle_aux_hidden_state_layer_ids at the top level "
        "(vLLM's key: hidden-state indices [1, 2, 3], the outputs of layers 0, 1, 2); "
        "unpatched 0.5.11's capture ignores them",
        "EAGLE3",
        DrafterSpec(kind="eagle3", aux_layer_ids=(1, 2, 3), ids_at="top"),
        CHAIN + V1,
    ),
    Case(
        "eagle3-topk2-v1",
        "EAGLE-3, a tree: topk 2, 3 steps, 6 draft tokens",
        "EAGLE3", EAGLE3,
        ("--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
         "--speculative-num-draft-tokens", "6") + V1,
    ),
    Case(
        "eagle-v1",
        "EAGLE (an EAGLE-1 LlamaForCausalLMEagle drafter), v1 worker",
        "EAGLE", DrafterSpec(kind="eagle"), CHAIN + V1,
    ),
    Case(
        "standalone-v1",
        "STANDALONE: a one-layer ordinary Llama drafting, v1 worker",
        "STANDALONE", DrafterSpec(kind="standalone"), CHAIN + V1,
    ),
    Case(
        "eagle3-fp16-drafter-bf16-target",
        "EAGLE-3, float16 drafter on a bfloat16 target at --dtype auto (the Llama-3.1-8B "
        "SpecForge pair's dtypes), v1 worker",
        "EAGLE3",
        DrafterSpec(kind="eagle3", aux_layer_ids=(0, 1, 2), dtype="float16"),
        CHAIN + V1,
        target=TargetSpec(dtype="bfloat16"),
        dtype="auto",
        known_failure="0.5.11 crashes at the drafter's fc (BFloat16 != Half); the patch builds "
        "the drafter in bfloat16 and serves past it, but no bfloat16 model serves on this CPU: "
        "Triton's interpreter has no bfloat16 scalar (decode_attention.py:127, "
        "'InterpreterBuilder' object has no attribute 'get_bf16'); the mirror pair below serves",
        known_error="get_bf16",
    ),
    Case(
        "eagle3-refused",
        "EAGLE-3 drafter declaring num_aux_hidden_states: 2 for 3 layer ids: start-up "
        "validation refuses it before the draft weights load",
        "EAGLE3",
        DrafterSpec(kind="eagle3", aux_layer_ids=(0, 1, 2), extra={"num_aux_hidden_states": 2}),
        CHAIN + V1,
        batches=(),
        expect="refuse",
        message="Invalid num_aux_hidden_states=2",
    ),
    Case(
        "eagle3-refused-shallow-target",
        "EAGLE-3 drafter without layer ids on the 4-layer target, whose default capture "
        "[2, 2, 1] is 2 distinct layers: start-up validation refuses it before the draft "
        "weights load (0.5.11 serves it and crashes at the drafter's fc)",
        "EAGLE3",
        DrafterSpec(kind="eagle3", aux_layer_ids=None),
        CHAIN + V1,
        batches=(),
        expect="refuse",
        message="Invalid eagle_config.eagle_aux_hidden_state_layer_ids=None",
    ),
)

CASES += (
    MIRRORED_DTYPES,
    replace(
        MIRRORED_DTYPES,
        name="eagle3-bf16-drafter-fp16-target-v2",
        description="EAGLE-3, bfloat16 drafter on a float16 target at --dtype auto, v2 "
        "(overlap) worker",
        flags=CHAIN,
    ),
)

CASES += (
    DP_ONE_REQUEST,
    Case(
        "eagle3-dp-attention-v2",
        "EAGLE-3, Qwen3 target, --tp 2 --dp 2 --enable-dp-attention, one request (rank dp1 "
        "idle), v2 worker; 0.5.11 crashes as v1 does",
        "EAGLE3", EAGLE3, CHAIN + DP_ATTENTION, batches=(ONE,), target=QWEN3, env=DP_ENV,
    ),
    DP_THREE_REQUESTS,
    # the same on the v2 (overlap) worker
    replace(
        DP_THREE_REQUESTS,
        name="eagle3-dp-attention-3-requests-v2",
        description=DP_THREE_REQUESTS.description.replace("v1 worker", "v2 worker"),
        flags=CHAIN + DP_ATTENTION,
    ),
)

CASES += (
    DP_NARROW,
    replace(
        DP_NARROW,
        name="eagle3-dp-attention-narrow-drafter-v2",
        description=DP_NARROW.description.replace("v1 worker", "v2 worker"),
        flags=CHAIN + DP_ATTENTION,
    ),
)

CASES += (
    FOUR_IDS,
    replace(
        FOUR_IDS,
        name="eagle3-4ids-v2",
        description=FOUR_IDS.description.replace("v1 worker", "v2 (overlap) worker"),
        flags=CHAIN,
    ),
    SPECULATORS_4IDS,
    replace(
        SPECULATORS_4IDS,
        name="eagle3-speculators-4ids-v2",
        description=SPECULATORS_4IDS.description.replace("v1 worker", "v2 (overlap) worker"),
        flags=CHAIN,
    ),
    replace(
        SPECULATORS_4IDS,
        name="eagle3-speculators-last-layer-v1",
        description="EAGLE-3 drafter in the speculators format whose ids ([1, 3, 5]) include "
        "the 6-layer target's last layer (hidden state 5: its input, as the speculators "
        "library counts), crafted as above; v1 worker",
        drafter=DrafterSpec(
            kind="eagle3", aux_layer_ids=(1, 3, 5), ids_at="top", craft="layers",
            format="speculators",
        ),
    ),
    replace(
        FOUR_IDS,
        name="eagle3-speculators-default3-v1",
        description="EAGLE-3 drafter in the speculators format without layer ids (SGLang's "
        "default 3: the inputs of layers [2, 4, 5] of the 8-layer target), crafted as above; "
        "v1 worker",
        drafter=DrafterSpec(kind="eagle3", aux_layer_ids=None, craft="layers",
                            format="speculators"),
        batches=(LONG,),
        target=replace(LAYERED, num_layers=8),
        release_error=SPECULATORS_UNREAD,
    ),
)

CASES += (
    DP_NARROW_4,
    replace(
        DP_NARROW_4,
        name="eagle3-dp-attention-narrow-4ids-v2",
        description=DP_NARROW_4.description.replace("v1 worker", "v2 worker"),
        flags=CHAIN + DP_ATTENTION,
    ),
)

CASES += (
    PD,
    replace(
        PD,
        name="eagle3-pd-v2",
        description="EAGLE-3, PD disaggregation as above, v2 (overlap) worker",
        flags=CHAIN + PD_FLAGS,
    ),
)

CASES += (
    MTP,
    replace(
        MTP,
        name="mtp-step3p5-v2",
        description="multi-layer EAGLE (MTP) as above, v2 (overlap) worker "
        "(MultiLayerEagleWorkerV2, whose draft worker allocates req_to_hidden_states_pool)",
        flags=CHAIN + ("--enable-multi-layer-eagle", "--speculative-draft-load-format", "dummy"),
    ),
)

#: The multi-layer workers' idle inputs: the MTP target under DP attention, one request (rank
#: dp1 idle). Random weights differ between one rank and two (the LM head is split across the
#: TP group, each shard drawn from the same seed), so the run without speculation is served
#: under DP attention too: DP attention is a flag of the target here. 0.5.11's Step-3.5 MTP
#: model deadlocks there (docs/smoke.md), so the case shows that blocker, within 3 minutes.
CASES += (
    replace(
        MTP,
        name="mtp-step3p5-dp-attention-v2",
        description="multi-layer EAGLE (MTP) under --tp 2 --dp 2 --enable-dp-attention, one "
        "request (rank dp1 idle: the multi-layer worker's idle inputs), v2 worker; the run "
        "without speculation is under DP attention too",
        flags=CHAIN + ("--enable-multi-layer-eagle", "--speculative-draft-load-format", "dummy"),
        target_flags=MTP.target_flags + DP_ATTENTION,
        target_env=DP_ENV,
        request_timeout=180.0,
        known_failure="0.5.11's Step-3.5 MTP model deadlocks under DP attention, patched or "
        "not: at the first draft extend the busy rank waits in the MTP embedding's all-reduce "
        "over the TP group (step3p5_mtp.py:96) while the idle rank, with no tokens, has passed "
        "it and waits in the MTP layer's DP gather (step3p5.py:617)",
        known_error="timed out",
    ),
)

CASES += class_cases("v1")

#: the subset CI runs (one server per case and tree: keep it small); the DP-attention cases
#: run from the patched tree only (test/test_smoke.py)
CI_CASES = (
    "eagle3-v1",
    "eagle3-refused",
    "eagle3-dp-attention-narrow-drafter-v1",
    "eagle3-dp-attention-narrow-drafter-v2",
)


def unreachable_reason(site: Site) -> str:
    """Why no case serves ``site`` on a CPU (``smoke``'s table of the sizing sites)."""
    if site.scope == "MultiLayerEagleDraftWorker.__init__":
        return "the MTP v2 draft worker's hidden-state pool: only the mtp-step3p5-v2 case builds it"
    if "multi_layer" in site.file and site.kind is Kind.IDLE_INPUT:
        return (
            "idle input of the multi-layer EAGLE (MTP) worker: only an idle rank under DP "
            "attention builds one, and 0.5.11's Step-3.5 MTP model deadlocks there before "
            "(mtp-step3p5-dp-attention-v2, a known failure)"
        )
    if site.kind is Kind.DETACHED_IDLE_INPUT:
        return (
            "idle input built in verify: only when every request of a batch finishes at "
            "verify (the first-verify batch) or a rank under DP attention is idle"
        )
    if site.kind is Kind.BUFFER:
        return "CUDA-graph buffer: CUDA graphs never run on a CPU (--disable-cuda-graph)"
    if site.kind is Kind.METADATA_BUFFER:
        return (
            "PD disaggregation: only a prefill and a decode server allocate it (the "
            "eagle3-pd cases)"
        )
    return (
        "idle input: a single server never builds one; only a rank under DP attention "
        "(--tp 2 --dp 2 --enable-dp-attention) whose batch goes idle does"
    )
