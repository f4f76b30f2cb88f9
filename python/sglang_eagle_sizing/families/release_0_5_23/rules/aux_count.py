"""``aux-count``: the readers of an EAGLE-3 drafter's aux hidden-state count (the extend
buffers' helper, ``llama_eagle3``'s and Kimi-K2.5's ``fc``) ask ``parse_eagle3_draft_config``.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.engine import Finding
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import PARSE
from sglang_eagle_sizing.families.release_0_5_23.rules.base import ScopedRule, parse_call
from sglang_eagle_sizing.families.release_0_5_23.sites import (
    AUX_COUNT_BLOCKS,
    AUX_COUNT_FUNCTIONS,
)
from sglang_eagle_sizing.syntax import code_of, contains, dotted, statement

LABEL = "aux-count"


def _calls_parser(node: cst.CSTNode) -> bool:
    return contains(node, parse_call)


class AuxCountBlockRule(ScopedRule):
    """``num_aux = getattr(<config>, "num_aux_hidden_states", None)`` and the ``if num_aux is
    None:`` block that falls back on the layer ids become one call of the parser."""

    concerns = (concerns.AUX_COUNT,)
    places = AUX_COUNT_BLOCKS
    files = frozenset(f for f, _ in AUX_COUNT_BLOCKS)
    needles = ("num_aux_hidden_states",)

    def __init__(self, file: str):
        super().__init__(file)
        self.found: set[str] = set()

    def leave_IndentedBlock(self, original_node, updated_node):
        scope = self.scope
        if scope not in self._scopes(self.file):
            return updated_node
        body = list(updated_node.body)
        for index, stmt in enumerate(body):
            target, config = _count_read(stmt)
            if target is None:
                continue
            self.found.add(scope)
            if _calls_parser(stmt):
                self.report(original_node.body[index], LABEL, Finding.ROUTED)
                return updated_node
            fallback = body[index + 1] if index + 1 < len(body) else None
            if not _is_none_fallback(fallback, target):
                raise self.fail(
                    original_node.body[index],
                    f"{scope}: {target} read without the `if {target} is None:` fallback "
                    "the rule knows",
                )
            self.report(original_node.body[index], LABEL, Finding.UNROUTED)
            new = statement(
                f"{target} = {PARSE}(\n    draft_hf_config={config}\n).num_aux_hidden_states\n",
                self.column_of(original_node.body[index]),
            )
            blank = [line for line in stmt.leading_lines if line.comment is None]
            body[index : index + 2] = [new.with_changes(leading_lines=blank)]
            return updated_node.with_changes(body=body)
        return updated_node

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope in self._scopes(self.file) and scope not in self.found:
            raise self.fail(original_node, f"{scope}: the aux-layer count was not found")
        return updated_node


def _count_read(stmt: cst.CSTNode) -> tuple[str | None, str | None]:
    """(``num_aux``, ``<config>``) for ``num_aux = getattr(<config>, "num_aux_hidden_states",
    None)`` or the routed ``num_aux = parse_eagle3_draft_config(draft_hf_config=<config>)
    .num_aux_hidden_states``."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None, None
    small = stmt.body[0]
    if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
        return None, None
    target, value = dotted(small.targets[0].target), small.value
    if target is None:
        return None, None
    if (
        isinstance(value, cst.Call)
        and dotted(value.func) == "getattr"
        and len(value.args) >= 2
        and isinstance(value.args[1].value, cst.SimpleString)
        and value.args[1].value.evaluated_value == "num_aux_hidden_states"
    ):
        return target, code_of(value.args[0].value)
    if (
        isinstance(value, cst.Attribute)
        and value.attr.value == "num_aux_hidden_states"
        and parse_call(value.value)
    ):
        return target, code_of(value.value.args[0].value)
    return None, None


def _is_none_fallback(stmt: cst.CSTNode | None, target: str) -> bool:
    return (
        isinstance(stmt, cst.If)
        and stmt.orelse is None
        and isinstance(stmt.test, cst.Comparison)
        and dotted(stmt.test.left) == target
        and len(stmt.test.comparisons) == 1
        and isinstance(stmt.test.comparisons[0].operator, cst.Is)
        and dotted(stmt.test.comparisons[0].comparator) == "None"
    )


class AuxCountFunctionRule(ScopedRule):
    """A function that counts the layer ids itself returns the parser's count (its
    docstring kept)."""

    concerns = (concerns.AUX_COUNT,)
    places = AUX_COUNT_FUNCTIONS
    files = frozenset(f for f, _ in AUX_COUNT_FUNCTIONS)
    needles = ("eagle_aux_hidden_state_layer_ids", PARSE)

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope not in self._scopes(self.file):
            return updated_node
        params = original_node.params.params
        body = list(updated_node.body.body)
        docstring = body[:1] if body and _is_docstring(body[0]) else []
        if _calls_parser(updated_node.body):
            self.report(original_node, LABEL, Finding.ROUTED, scope)
            return updated_node
        if not params or not contains(updated_node.body, _reads_layer_ids):
            raise self.fail(original_node, f"{scope}: the aux-layer count was not found")
        self.report(original_node, LABEL, Finding.UNROUTED, scope)
        config = params[0].name.value
        column = self.column_of(original_node) + 4
        new = statement(
            f"return {PARSE}(draft_hf_config={config}).num_aux_hidden_states\n", column
        )
        return updated_node.with_changes(
            body=updated_node.body.with_changes(body=[*docstring, new])
        )


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _reads_layer_ids(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.SimpleString)
        and node.evaluated_value == "eagle_aux_hidden_state_layer_ids"
    )
