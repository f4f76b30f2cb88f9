"""Route hidden-state buffers (``torch.zeros((rows, <hidden width>), dtype=...)``).

A buffer site is an assignment from a ``torch`` allocation whose shape tuple ends in a hidden
width. Known sites get ``<Phase class>.hidden_size_for(worker)`` as that width and
``dtype_for(worker)`` as dtype. An ``if``/``else`` whose branches become the same routed buffer
(0.5.11's extend runner sizes EAGLE-3-with-aux and the rest in two branches) collapses into
that one buffer. Unknown buffers are reported.
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11.concerns import SIZING_CONCERNS
from sglang_eagle_sizing.families.release_0_5_11.sites import Kind, site_for
from sglang_eagle_sizing.syntax import (
    call_name,
    code_of,
    keyword_arg,
    mentions_hidden_width,
    same_expression,
    statement,
)

ALLOCATORS = frozenset({"torch.zeros", "torch.empty", "torch.ones", "torch.full"})


def buffer_shape(stmt: cst.CSTNode) -> tuple[cst.Assign, cst.Call, cst.Tuple] | None:
    """The assignment, allocation call and shape of a hidden-state buffer statement."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    small = stmt.body[0]
    if not isinstance(small, cst.Assign) or call_name(small.value) not in ALLOCATORS:
        return None
    call = small.value
    if not call.args or not isinstance(call.args[0].value, cst.Tuple):
        return None
    shape = call.args[0].value
    if not shape.elements or not mentions_hidden_width(shape.elements[-1].value):
        return None
    return small, call, shape


def buffer_call(node: cst.CSTNode) -> bool:
    """An allocation whose shape tuple ends in a hidden width, wherever it stands."""
    return (
        call_name(node) in ALLOCATORS
        and bool(node.args)
        and isinstance(node.args[0].value, cst.Tuple)
        and bool(node.args[0].value.elements)
        and mentions_hidden_width(node.args[0].value.elements[-1].value)
    )


class BufferRule(Rule):
    concerns = SIZING_CONCERNS
    needles = ("hidden_size",)

    def __init__(self, file: str):
        super().__init__(file)
        self._known_calls: set[int] = set()
        self._parameters: list[set[str]] = []

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        found = buffer_shape(node)
        site = site_for(self.file, self.scope)
        if found is not None and site is not None and site.kind is Kind.BUFFER:
            self._known_calls.add(id(found[1]))
        return True

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._parameters.append({p.name.value for p in node.params.params})
        return super().visit_FunctionDef(node)

    def leave_FunctionDef(self, original_node, updated_node):
        self._parameters.pop()
        return super().leave_FunctionDef(original_node, updated_node)

    def _sized_by_caller(self, call: cst.Call) -> bool:
        """``torch.empty((0, hidden_size))`` with ``hidden_size`` a parameter: the callers
        (``create_idle_input(hidden_size=...)``) are the sites, not this."""
        width = call.args[0].value.elements[-1].value
        return bool(self._parameters) and isinstance(width, cst.Name) and width.value in self._parameters[-1]

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call):
        # A hidden-width allocation that is not a known site's buffer statement.
        if (
            buffer_call(original_node)
            and id(original_node) not in self._known_calls
            and not self._sized_by_caller(original_node)
        ):
            self.report(original_node, "buffer", Finding.UNKNOWN)
        return updated_node

    def leave_SimpleStatementLine(self, original_node, updated_node):
        found = buffer_shape(original_node)
        if found is None or id(found[1]) not in self._known_calls:
            return updated_node
        _, call, shape = found
        site = site_for(self.file, self.scope)
        if not enabled(site.concern):
            return updated_node
        input_class = site.phase.input_class
        width = f"{input_class}.hidden_size_for({site.worker})"
        dtype = f"{input_class}.dtype_for({site.worker})"
        dtype_arg = keyword_arg(call, "dtype")
        if dtype_arg is None:
            raise self.fail(original_node, f"{site.scope}: hidden-state buffer without dtype=")
        label = site.phase.value
        if same_expression(shape.elements[-1].value, width) and same_expression(
            dtype_arg.value, dtype
        ):
            self.report(original_node, label, Finding.ROUTED)
            return updated_node
        self.report(original_node, label, Finding.UNROUTED)
        new_shape = shape.with_changes(
            elements=[
                *shape.elements[:-1],
                shape.elements[-1].with_changes(value=cst.parse_expression(width)),
            ]
        )
        args = [call.args[0].with_changes(value=new_shape)]
        for arg in call.args[1:]:
            if arg is dtype_arg:
                arg = arg.with_changes(value=cst.parse_expression(dtype))
            args.append(arg)
        # Render through black: the new width may change how the call wraps.
        new_stmt = original_node.with_changes(
            body=[found[0].with_changes(value=call.with_changes(args=args))],
            leading_lines=[],
        )
        rendered = statement(code_of(new_stmt), self.column_of(original_node))
        return rendered.with_changes(leading_lines=updated_node.leading_lines)

    def leave_If(self, original_node: cst.If, updated_node: cst.If):
        orelse = updated_node.orelse
        if not isinstance(orelse, cst.Else):
            return updated_node
        branches = [updated_node.body.body, orelse.body.body]
        if not all(len(branch) == 1 for branch in branches):
            return updated_node
        first, second = branches[0][0], branches[1][0]
        if buffer_shape(first) is None or not first.deep_equals(second):
            return updated_node
        if site_for(self.file, self.scope) is None:
            return updated_node
        # Both branches are now the same routed buffer: keep one, without the `if`, wrapped
        # again at the `if`'s indentation (one level out).
        rendered = statement(
            code_of(first.with_changes(leading_lines=[])), self.column_of(original_node)
        )
        return rendered.with_changes(leading_lines=updated_node.leading_lines)
