"""``draft-dtype``: the draft model's dtype at ``--dtype auto`` is resolved as the target's;
and the shape both per-drafter decisions of the server arguments share
(``DrafterHookRule``): a function after ``_handle_iquest_q1_mtp_draft``'s definition, its
call in ``_handle_eagle_family`` after that one's call.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    DRAFT_DTYPE_FUNCTION,
    DRAFT_DTYPE_HOOK,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.base import two_blank_lines
from sglang_eagle_sizing.families.release_0_5_23.sites import DRAFT_DTYPE, DRAFT_DTYPE_ANCHOR
from sglang_eagle_sizing.syntax import dotted, statement


class DrafterHookRule(Rule):
    """``_handle_eagle_family`` calls ``hook(server_args)`` after its other per-drafter
    decision (``_handle_iquest_q1_mtp_draft``), the function ``function`` defined after that
    one's definition. Already there anywhere in the function or module: routed."""

    files = frozenset({DRAFT_DTYPE[0]})
    #: the decision the hook follows, its call and its definition
    anchor = DRAFT_DTYPE_ANCHOR
    needles = (DRAFT_DTYPE_ANCHOR,)
    hook = ""
    function = ""
    label = ""

    def __init__(self, file: str):
        super().__init__(file)
        self.called = False

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != DRAFT_DTYPE[1]:
            return updated_node
        body = list(updated_node.body)
        calls = [i for i, stmt in enumerate(body) if _calls_only(stmt, self.anchor)]
        if len(calls) != 1:
            return updated_node
        self.called = True
        index = calls[0]
        if any(_calls_only(stmt, self.hook) for stmt in body[index + 1 :]):
            self.report(original_node.body[index], self.label, Finding.ROUTED)
            return updated_node
        self.report(original_node.body[index], self.label, Finding.UNROUTED)
        body.insert(index + 1, statement(f"{self.hook}(server_args)\n"))
        return updated_node.with_changes(body=body)

    def leave_Module(self, original_node, updated_node):
        if not self.called:
            raise self.fail(
                original_node,
                f"{DRAFT_DTYPE[1]}: no {self.anchor}(...) call to follow",
            )
        body = list(updated_node.body)
        names = [getattr(stmt, "name", None) for stmt in body]
        defined = [i for i, n in enumerate(names) if n is not None and n.value == self.anchor]
        if any(n is not None and n.value == self.hook for n in names):
            return updated_node
        if len(defined) != 1:
            raise self.fail(original_node, f"no top-level def {self.anchor}")
        new = cst.parse_module(self.function.lstrip("\n")).body[0]
        body.insert(defined[0] + 1, new.with_changes(leading_lines=two_blank_lines()))
        return updated_node.with_changes(body=body)


class DraftDtypeRule(DrafterHookRule):
    """At ``--dtype auto`` the draft is built in the target's dtype:
    ``inserted.DRAFT_DTYPE_FUNCTION``."""

    concerns = (concerns.DRAFT_DTYPE,)
    hook = DRAFT_DTYPE_HOOK
    function = DRAFT_DTYPE_FUNCTION
    label = "draft-dtype"


def _calls_only(stmt: cst.CSTNode, name: str) -> bool:
    """``stmt`` is a call of ``name`` alone (its result unused)."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.Call)
        and dotted(stmt.body[0].value.func) == name
    )


LABEL_DTYPE = DraftDtypeRule.label
