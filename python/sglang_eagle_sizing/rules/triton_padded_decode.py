"""Triton's decode attention takes a batch padded after its metadata was built: it attends the
rows ``kv_indptr`` describes and leaves the padded rows zero.

Under DP attention ``ModelRunner.forward`` pads every batch to the size the ranks agreed on
(``ForwardBatch.prepare_mlp_sync_batch``). The EAGLE draft steps initialise their attention
metadata once, before that (``EAGLEWorker.draft`` and the v2 draft worker, then
``forward(..., skip_attn_backend_init=True)`` per step). Without CUDA graphs, a rank whose
requests are fewer than another rank's (MAX_LEN padding, e.g. 1 request next to 2) then runs
``TritonAttnBackend.forward_decode`` with more query rows than ``kv_indptr`` has, and
``decode_attention_fwd`` stops at ``assert q.shape[0] <= kv_indptr.shape[0] - 1``. The padded
rows are filler (``post_forward_mlp_sync_batch`` drops their logits), so the guard passes the
kernel the rows the metadata describes and zeroes the rest of the output. For every other batch
``q`` has exactly those rows and the slices are the whole tensors.

This is not a sizing site and no idle input is involved: a DP-attention batch with requests on
every rank needs it to serve at all without CUDA graphs, and the patch's own idle ranks are only
reachable there (``docs/design.md``).
"""

from __future__ import annotations

import libcst as cst

from ..concerns import ATTENTION_BACKENDS
from ..engine import Finding, Rule
from ..sites import TRITON_DECODE
from ..syntax import code_of, dotted, same_expression, statements, with_comment

LABEL = "padded-decode"
KERNEL = "self.decode_attention_fwd"
ROWS = "num_rows"
COMMENT = (
    "Under DP attention a draft decode batch is padded after its metadata was",
    "built (no CUDA graph): attend the rows kv_indptr has, zero the rest.",
)

#: the arguments of the kernel call the guard slices: (position, name of the tensor)
SLICED = ((0, "q"), (3, "o"))
#: the position of the index pointer the rows are counted from
INDPTR = 4


def _kernel_call(stmt: cst.CSTNode) -> cst.Call | None:
    """``self.decode_attention_fwd(...)`` as a statement of its own."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        expr = stmt.body[0]
        if isinstance(expr, cst.Expr) and isinstance(expr.value, cst.Call):
            if dotted(expr.value.func) == KERNEL:
                return expr.value
    return None


def _view_of(arg: cst.Arg) -> cst.CSTNode | None:
    """``X`` of the argument ``X.view(...)``."""
    value = arg.value
    if (
        isinstance(value, cst.Call)
        and isinstance(value.func, cst.Attribute)
        and value.func.attr.value == "view"
    ):
        return value.func.value
    return None


def _sliced(arg: cst.Arg, name: str) -> cst.Arg:
    call = arg.value
    rows = cst.parse_expression(f"{name}[:{ROWS}]")
    return arg.with_changes(
        value=call.with_changes(func=call.func.with_changes(value=rows))
    )


class TritonPaddedDecodeRule(Rule):
    concerns = (ATTENTION_BACKENDS,)
    files = frozenset({TRITON_DECODE[0]})
    needles = ("TritonAttnBackend",)

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope != TRITON_DECODE[1]:
            return updated_node
        body = list(updated_node.body.body)
        calls = [(i, _kernel_call(stmt)) for i, stmt in enumerate(body)]
        calls = [(i, call) for i, call in calls if call is not None]
        if len(calls) != 1:
            raise self.fail(
                original_node,
                f"{scope}: expected one {KERNEL}(...) statement in the method body, "
                f"found {len(calls)}",
            )
        index, call = calls[0]
        original = original_node.body.body[index]
        if len(call.args) <= INDPTR:
            raise self.fail(original, f"{scope}: {KERNEL}(...) takes fewer arguments than 0.5.11's")
        receivers = [_view_of(call.args[position]) for position, _ in SLICED]
        if all(
            r is not None and same_expression(r, f"{name}[:{ROWS}]")
            for r, (_, name) in zip(receivers, SLICED)
        ):
            self.report(original, LABEL, Finding.ROUTED, scope)
            return updated_node
        for receiver, (position, name) in zip(receivers, SLICED):
            if receiver is None or not same_expression(receiver, name):
                found = code_of(call.args[position].value)
                raise self.fail(
                    original,
                    f"{scope}: argument {position + 1} of {KERNEL} is {found!r}, "
                    f"expected {name}.view(...)",
                )
        self.report(original, LABEL, Finding.UNROUTED, scope)
        args = list(call.args)
        for position, name in SLICED:
            args[position] = _sliced(args[position], name)
        column = self.column_of(original)
        indptr = code_of(call.args[INDPTR].value)
        guard = statements(
            f"{ROWS} = {indptr}.shape[0] - 1\n"
            f"if q.shape[0] > {ROWS}:\n"
            f"    o[{ROWS}:] = 0\n",
            column,
        )
        guard[0] = with_comment(guard[0], *COMMENT, column=column)
        kernel = body[index]
        new_kernel = kernel.with_changes(
            body=[kernel.body[0].with_changes(value=call.with_changes(args=args))],
        )
        guard[0] = guard[0].with_changes(
            leading_lines=[*kernel.leading_lines, *guard[0].leading_lines]
        )
        body[index : index + 1] = [*guard, new_kernel.with_changes(leading_lines=[])]
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
