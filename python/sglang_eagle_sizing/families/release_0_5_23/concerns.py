"""SGLang 0.5.23's concerns, in the order its series lands them: pull request by pull request
(``series.PULL_REQUESTS``): the EAGLE-3 drafter's config read once and checked before load,
the speculators format, the draft's dtype, Gemma-3's capture, then the fixes of what serving
showed broken under PD and DP attention (STANDALONE's draft proposal across PD, and the idle
verify input's KV layout)."""

from __future__ import annotations

AUX_COUNT = "aux-count"
CAPTURE_CONTRACT = "capture-contract"
CAPTURE_CONTRACT_HANDED_ON = "capture-contract-handed-on"
CAPTURE_CONTRACT_OWN_RULES = "capture-contract-own-rules"
TOP_LEVEL_LAYER_IDS = "top-level-layer-ids"
DRAFT_CHECK = "draft-check"
DRAFT_DTYPE = "draft-dtype"
SPECULATORS_NORMS = "speculators-norms"
SPECULATORS_EAGLE3 = "speculators-eagle3"
GEMMA3_AUX_RESIDUAL = "gemma3-aux-residual"
STANDALONE_DISAGG = "standalone-disagg"
IDLE_VERIFY_KV = "idle-verify-kv"

ORDER: tuple[str, ...] = (
    AUX_COUNT,
    CAPTURE_CONTRACT,
    CAPTURE_CONTRACT_HANDED_ON,
    CAPTURE_CONTRACT_OWN_RULES,
    DRAFT_CHECK,
    TOP_LEVEL_LAYER_IDS,
    SPECULATORS_NORMS,
    SPECULATORS_EAGLE3,
    DRAFT_DTYPE,
    GEMMA3_AUX_RESIDUAL,
    STANDALONE_DISAGG,
    IDLE_VERIFY_KV,
)
