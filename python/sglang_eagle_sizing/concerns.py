"""The concerns the patch is made of, in the order a series of patches lands them.

Every rule, and every piece of what a rule inserts, belongs to one concern. ``apply`` writes
them all. ``pr --series`` writes one patch per concern: patch k is the difference between the
tree the rules write with the first k-1 concerns and the tree they write with the first k
(``only``), so the last patch leaves exactly the tree ``apply`` writes.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator

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

#: SGLang 0.5.23's concerns (``after_refactor/``), in the order its series lands them.
AUX_COUNT = "aux-count"
TOP_LEVEL_LAYER_IDS = "top-level-layer-ids"
DRAFT_CHECK = "draft-check"
DRAFT_DTYPE = "draft-dtype"
SPECULATORS_EAGLE3 = "speculators-eagle3"
SPECULATORS_NORMS = "speculators-norms"
AFTER_REFACTOR_ORDER: tuple[str, ...] = (
    AUX_COUNT,
    TOP_LEVEL_LAYER_IDS,
    DRAFT_CHECK,
    DRAFT_DTYPE,
    SPECULATORS_NORMS,
    SPECULATORS_EAGLE3,
)

#: The concerns that route sizing sites: the routing itself, then one behaviour fix each.
SIZING_CONCERNS = (ROUTING, EXTEND_WIDTH, MULTI_LAYER_WIDTH, V2_IDLE_WIDTH, PD_STANDALONE)

#: 0.5.23's fixes of what serving showed broken under PD and DP attention, after its sizing
#: series: STANDALONE's draft proposal across PD, and the idle verify input's KV layout.
STANDALONE_DISAGG = "standalone-disagg"
IDLE_VERIFY_KV = "idle-verify-kv"
AFTER_REFACTOR_ORDER += (STANDALONE_DISAGG, IDLE_VERIFY_KV)

_ENABLED: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "concerns", default=None
)


#: While ``recording``: every concern asked about, with the answer given.
_ASKED: contextvars.ContextVar[dict[str, bool] | None] = contextvars.ContextVar(
    "asked", default=None
)


class ConcernError(ValueError):
    """A concern name that is not in ``ORDER``."""


def _known(names: Iterable[str]) -> frozenset[str]:
    names = frozenset(names)
    known = (*ORDER, *AFTER_REFACTOR_ORDER)
    unknown = sorted(names - set(known))
    if unknown:
        raise ConcernError(f"unknown concern {unknown[0]!r}; known: {', '.join(known)}")
    return names


@contextlib.contextmanager
def only(names: Iterable[str]) -> Iterator[None]:
    """Within the block, the rules write only these concerns."""
    token = _ENABLED.set(_known(names))
    try:
        yield
    finally:
        _ENABLED.reset(token)


@contextlib.contextmanager
def recording() -> Iterator[dict[str, bool]]:
    """Within the block, every concern asked about (``enabled``, ``any_enabled``,
    ``all_enabled``) and the answer: what the rules wrote depends on those answers only, so a
    rewrite holds for every set of concerns that gives the same (``answers_hold``)."""
    asked: dict[str, bool] = {}
    token = _ASKED.set(asked)
    try:
        yield asked
    finally:
        _ASKED.reset(token)


def answers_hold(asked: dict[str, bool], names: Iterable[str] | None) -> bool:
    """Whether the concerns ``names`` (None: every concern) answer as ``asked`` records."""
    current = None if names is None else frozenset(names)
    return all(
        (current is None or name in current) == answer for name, answer in asked.items()
    )


def _answer(name: str, current: frozenset[str] | None) -> bool:
    answer = current is None or name in current
    asked = _ASKED.get()
    if asked is not None:
        asked[name] = answer
    return answer


def enabled(name: str) -> bool:
    """Whether the rules write ``name`` now (every concern, outside ``only``)."""
    current = _ENABLED.get()
    if current is not None:
        _known((name,))
    return _answer(name, current)


def any_enabled(names: Iterable[str]) -> bool:
    return any(enabled(name) for name in names)


def all_enabled() -> bool:
    current = _ENABLED.get()
    return all([_answer(name, current) for name in ORDER])


def prefix(count: int) -> tuple[str, ...]:
    """The first ``count`` concerns of the series."""
    return ORDER[:count]
