"""Which concerns the rules write now: every one, or those ``only`` names.

Every rule, and every piece of what a rule inserts, belongs to one concern of its family
(``families/<family>/concerns.py`` names them, in the order the family's series lands them).
``pr --series`` writes patch k as the difference between the trees the rules write with the
first k-1 concerns and with the first k.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator

_ENABLED: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar(
    "concerns", default=None
)


#: While ``recording``: every concern asked about, with the answer given.
_ASKED: contextvars.ContextVar[dict[str, bool] | None] = contextvars.ContextVar(
    "asked", default=None
)


class ConcernError(ValueError):
    """A concern name that no family has."""


def _known(names: Iterable[str]) -> frozenset[str]:
    from sglang_eagle_sizing.families import FAMILIES

    names = frozenset(names)
    known = [name for family in FAMILIES for name in family.concerns]
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


def current() -> frozenset[str] | None:
    """The concerns ``only`` names now; None: every one."""
    return _ENABLED.get()


def enabled(name: str) -> bool:
    """Whether the rules write ``name`` now (every concern, outside ``only``)."""
    current = _ENABLED.get()
    if current is not None:
        _known((name,))
    return _answer(name, current)


def any_enabled(names: Iterable[str]) -> bool:
    return any(enabled(name) for name in names)


def all_enabled(names: Iterable[str]) -> bool:
    """Whether every one of ``names`` (a family's concerns) is written now."""
    current = _ENABLED.get()
    return all([_answer(name, current) for name in names])
