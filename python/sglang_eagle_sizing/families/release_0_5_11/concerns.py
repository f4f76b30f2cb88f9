"""SGLang 0.5.9-0.5.11's concerns, in the order its series lands them.

Every rule, and every piece of what a rule inserts, belongs to one concern. ``apply`` writes
them all. ``pr --series`` writes one patch per concern: patch k is the difference between the
tree the rules write with the first k-1 concerns and the tree they write with the first k
(``concerns.only``), so the last patch leaves exactly the tree ``apply`` writes.
"""

from __future__ import annotations

ANNOTATION = "annotation"
PARSER = "parser"
TARGET_CAPTURE = "target-capture"
VALIDATION = "validation"
DTYPE = "dtype"
ROUTING = "routing"
EXTEND_WIDTH = "extend-width"
MULTI_LAYER_WIDTH = "multi-layer-width"
V2_IDLE_WIDTH = "v2-idle-width"
PD_STANDALONE = "pd-standalone"
DRAFTER_FC = "drafter-fc"
IDLE_INPUTS = "idle-inputs"
ATTENTION_BACKENDS = "attention-backends"
EAGLE3_NORM_VARIANTS = "eagle3-norm-variants"
SPECULATORS_FORMAT = "speculators-format"
E2E_TEST = "e2e-test"

#: In the order they land: each may use what the ones before it provide, never what a later
#: one does (the fork tests of each are run on the tree as it stands after it).
ORDER: tuple[str, ...] = (
    ANNOTATION,
    PARSER,
    TARGET_CAPTURE,
    VALIDATION,
    DTYPE,
    ROUTING,
    EXTEND_WIDTH,
    MULTI_LAYER_WIDTH,
    V2_IDLE_WIDTH,
    PD_STANDALONE,
    DRAFTER_FC,
    IDLE_INPUTS,
    ATTENTION_BACKENDS,
    EAGLE3_NORM_VARIANTS,
    SPECULATORS_FORMAT,
    E2E_TEST,
)

#: The concerns that route sizing sites: the routing itself, then one behaviour fix each.
SIZING_CONCERNS = (ROUTING, EXTEND_WIDTH, MULTI_LAYER_WIDTH, V2_IDLE_WIDTH, PD_STANDALONE)


def prefix(count: int) -> tuple[str, ...]:
    """The first ``count`` concerns of the series."""
    return ORDER[:count]
