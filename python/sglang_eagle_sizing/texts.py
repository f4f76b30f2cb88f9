"""Helpers on the texts a family inserts (plain strings: no libcst, no black, so that a family's
site list may use them without loading either)."""

from __future__ import annotations


def rewritten(source: str, change: tuple[str, str]) -> str:
    """``source`` (text a family inserts) with a later concern's ``(old, new)`` made; ``old``
    must occur once: the texts are ours, so anything else is a bug of the family's."""
    old, new = change
    if source.count(old) != 1:
        raise AssertionError(f"{old!r} occurs {source.count(old)} times in the text it rewrites")
    return source.replace(old, new)
