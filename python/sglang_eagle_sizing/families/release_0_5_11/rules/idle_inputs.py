"""Route ``create_idle_input(hidden_size=..., dtype=...)`` sites through the phase classmethods.

Owns the decode-phase idle inputs and the idle inputs built in ``EagleVerifyInput.verify``
(no worker in reach: they become ``EagleDraftExtendInput``s and the worker that consumes them
rebuilds them, see ``extend_idle.py``). Reports any other idle input it does not know.
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11.concerns import SIZING_CONCERNS
from sglang_eagle_sizing.families.release_0_5_11.sites import ExtendPhase, Kind, Phase, site_for
from sglang_eagle_sizing.syntax import (
    code_of,
    dotted,
    drop_unused_locals,
    has_comment,
    keyword_arg,
    same_expression,
    statement,
    with_comment,
)

DETACHED_COMMENT = (
    "No worker in reach: the worker rebuilds this idle input",
    "(EagleDraftExtendInput.hidden_size_for) before draft extend.",
)


def idle_input_call(node: cst.CSTNode) -> bool:
    """``<Class>.create_idle_input(..., hidden_size=..., ...)``."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "create_idle_input"
        and keyword_arg(node, "hidden_size") is not None
    )


def routed_args(call: cst.Call, input_class: str, worker: str) -> bool:
    hidden_size = keyword_arg(call, "hidden_size")
    dtype = keyword_arg(call, "dtype")
    return (
        dotted(call.func) == f"{input_class}.create_idle_input"
        and same_expression(hidden_size.value, f"{input_class}.hidden_size_for({worker})")
        and dtype is not None
        and same_expression(dtype.value, f"{input_class}.dtype_for({worker})")
    )


def replaced_locals(call: cst.Call) -> set[str]:
    """The locals ``route_args`` stops reading: a ``hidden_size=`` or ``dtype=`` given as a
    bare name (a fork that reads the width into a local first)."""
    names = set()
    for keyword in ("hidden_size", "dtype"):
        arg = keyword_arg(call, keyword)
        if arg is not None and isinstance(arg.value, cst.Name):
            names.add(arg.value.value)
    return names


def route_args(call: cst.Call, input_class: str, worker: str) -> cst.Call:
    args = []
    for arg in call.args:
        name = arg.keyword.value if arg.keyword is not None else None
        if name == "hidden_size":
            arg = arg.with_changes(
                value=cst.parse_expression(f"{input_class}.hidden_size_for({worker})")
            )
        elif name == "dtype":
            arg = arg.with_changes(
                value=cst.parse_expression(f"{input_class}.dtype_for({worker})")
            )
        args.append(arg)
    return call.with_changes(
        func=call.func.with_changes(value=cst.Name(input_class)), args=args
    )


class IdleInputRule(Rule):
    concerns = SIZING_CONCERNS
    needles = ("create_idle_input",)

    def __init__(self, file: str):
        super().__init__(file)
        self._detached_in_statement = False
        #: the statement holds a call this pass rewrites (not set by the check pass,
        #: whose rewritten nodes are dropped)
        self._rerender = False
        #: per enclosing function, the locals a routed call no longer reads
        self._replaced: list[set[str]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        self._replaced.append(set())
        return super().visit_FunctionDef(node)

    def leave_FunctionDef(self, original_node, updated_node):
        replaced = self._replaced.pop()
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        return drop_unused_locals(updated_node, replaced) if replaced else updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call):
        if not idle_input_call(original_node):
            return updated_node
        site = site_for(self.file, self.scope)
        if site is None or site.kind is Kind.BUFFER:
            self.report(original_node, "idle-input", Finding.UNKNOWN)
            return updated_node
        if site.kind is Kind.IDLE_INPUT and site.phase is Phase.EXTEND:
            return updated_node  # extend_idle.py owns these
        if not enabled(site.concern):
            return updated_node
        if keyword_arg(original_node, "dtype") is None:
            raise self.fail(original_node, f"{site.scope}: idle input without dtype=")
        label = site.phase.value
        if site.kind is Kind.DETACHED_IDLE_INPUT:
            if dotted(original_node.func) == f"{ExtendPhase}.create_idle_input":
                self.report(original_node, label, Finding.ROUTED)
                return updated_node
            self.report(original_node, label, Finding.UNROUTED)
            self._detached_in_statement = True
            self._rerender = updated_node is not original_node
            return updated_node.with_changes(
                func=updated_node.func.with_changes(value=cst.Name(ExtendPhase))
            )
        input_class = site.phase.input_class
        if routed_args(original_node, input_class, site.worker):
            self.report(original_node, label, Finding.ROUTED)
            return updated_node
        self.report(original_node, label, Finding.UNROUTED)
        if self._replaced:
            self._replaced[-1] |= replaced_locals(original_node)
        self._rerender = updated_node is not original_node
        return route_args(updated_node, input_class, site.worker)

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if self._rerender:
            self._rerender = False
            # A routed call is longer than 0.5.11's: black wraps the statement again, at
            # the tree's line length.
            rendered = statement(
                code_of(updated_node.with_changes(leading_lines=[])),
                self.column_of(original_node),
            )
            updated_node = rendered.with_changes(leading_lines=updated_node.leading_lines)
        if self._detached_in_statement:
            self._detached_in_statement = False
            if not has_comment(updated_node, DETACHED_COMMENT[0]):
                return with_comment(
                    updated_node, *DETACHED_COMMENT, column=self.column_of(original_node)
                )
        return updated_node
