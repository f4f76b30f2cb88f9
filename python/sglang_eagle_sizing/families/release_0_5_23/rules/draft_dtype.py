"""``draft-dtype``: the draft model's dtype at ``--dtype auto`` is resolved as the target's;
and the shape both per-drafter decisions of the server arguments share
(``DrafterHookRule``): a function after ``_handle_iquest_q1_mtp_draft``'s definition, its
call in ``_handle_eagle_family`` after that one's call.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    DRAFT_DTYPE_FUNCTION,
    DRAFT_DTYPE_HOOK,
    RESOLVING_VIEW,
    before_resolving_view,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.base import two_blank_lines
from sglang_eagle_sizing.families.release_0_5_23.sites import DRAFT_DTYPE, DRAFT_DTYPE_ANCHOR
from sglang_eagle_sizing.syntax import dotted, statement


class DrafterHookRule(Rule):
    """``_handle_eagle_family`` calls ``hook(server_args)`` after the call of ``anchor`` (its
    other per-drafter decision), or where ``fallback`` finds in a release without that call;
    ``function`` is defined after ``anchor``'s definition, else before
    ``_handle_eagle_family``'s, reading the arguments as the module does (through
    ``resolving_view``, 0.5.19 on, or on ``server_args`` itself). Already there anywhere in
    the function or module: routed. Neither place found: refused, naming what was looked
    for."""

    # no needle: a file without the function must say so, not skip
    files = frozenset({DRAFT_DTYPE[0]})
    #: the decision the hook follows, its call and its definition
    anchor = DRAFT_DTYPE_ANCHOR
    #: what ``fallback`` looks for, for the message
    fallback_text = ""
    hook = ""
    function = ""
    label = ""

    def __init__(self, file: str):
        super().__init__(file)
        self.called = False
        self.function_body = None
        #: the module reads its arguments through ``resolving_view`` (0.5.19 on)
        self.resolving = True

    def visit_Module(self, node):
        super().visit_Module(node)
        self.resolving = bool(m.findall(node, m.Name(RESOLVING_VIEW)))
        return True

    def visit_FunctionDef(self, node):
        super().visit_FunctionDef(node)
        if self.scope == DRAFT_DTYPE[1]:
            self.function_body = node.body
        return True

    @staticmethod
    def fallback(body: list) -> int | None:
        """In a release without the anchor's call: the index of the statement the hook
        follows (-1: first thing), or None."""
        return None

    def leave_IndentedBlock(self, original_node, updated_node):
        if original_node is not self.function_body:
            return updated_node
        body = list(updated_node.body)
        calls = [i for i, stmt in enumerate(body) if _calls_only(stmt, self.anchor)]
        if len(calls) > 1:
            return updated_node
        index = calls[0] if calls else self.fallback(body)
        if index is None:
            return updated_node
        self.called = True
        hooked = [i for i, stmt in enumerate(body) if _calls_only(stmt, self.hook)]
        if hooked:
            self.report(original_node.body[hooked[0]], self.label, Finding.ROUTED)
            return updated_node
        self.report(original_node.body[max(index, 0)], self.label, Finding.UNROUTED)
        call = statement(f"{self.hook}(server_args)\n")
        if index >= 0 and _imports(body[index]):  # a blank line after the imports
            call = call.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        body.insert(index + 1, call)
        return updated_node.with_changes(body=body)

    def leave_Module(self, original_node, updated_node):
        if not self.called:
            raise self.fail(
                original_node,
                f"{DRAFT_DTYPE[1]}: no {self.anchor}(...) call to follow, nor "
                f"{self.fallback_text} (where the {self.label} change goes)",
            )
        body = list(updated_node.body)
        names = [getattr(stmt, "name", None) for stmt in body]
        if any(n is not None and n.value == self.hook for n in names):
            return updated_node
        defined = [i for i, n in enumerate(names) if n is not None and n.value == self.anchor]
        users = [i for i, n in enumerate(names) if n is not None and n.value == DRAFT_DTYPE[1]]
        if len(defined) == 1:
            at = defined[0] + 1
        elif len(users) == 1:
            at = users[0]
        else:
            raise self.fail(original_node, f"no top-level def {self.anchor} or {DRAFT_DTYPE[1]}")
        function = self.function if self.resolving else before_resolving_view(self.function)
        new = cst.parse_module(function.lstrip("\n")).body[0]
        body.insert(at, new.with_changes(leading_lines=two_blank_lines()))
        return updated_node.with_changes(body=body)


def _reads_model_arch(stmt: cst.CSTNode) -> bool:
    """``if model_arch in [...]:``."""
    return (
        isinstance(stmt, cst.If)
        and isinstance(stmt.test, cst.Comparison)
        and dotted(stmt.test.left) == "model_arch"
        and isinstance(stmt.test.comparisons[0].operator, cst.In)
    )


class DraftDtypeRule(DrafterHookRule):
    """At ``--dtype auto`` the draft is built in the target's dtype:
    ``inserted.DRAFT_DTYPE_FUNCTION``."""

    concerns = (concerns.DRAFT_DTYPE,)
    fallback_text = "an `if model_arch in [...]:` block (before 0.5.21)"
    hook = DRAFT_DTYPE_HOOK
    function = DRAFT_DTYPE_FUNCTION
    label = "draft-dtype"

    @staticmethod
    def fallback(body):
        found = [i for i, stmt in enumerate(body) if _reads_model_arch(stmt)]
        return found[0] if len(found) == 1 else None


def _imports(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and isinstance(
        stmt.body[0], (cst.Import, cst.ImportFrom)
    )


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
