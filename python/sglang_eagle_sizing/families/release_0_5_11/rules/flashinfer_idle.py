"""FlashInfer's decode planner takes a padded idle batch: its CPU index pointer covers the rows
``kv_indptr`` describes, not every row of the batch.

``FlashInferIndicesUpdaterDecode.call_begin_forward`` takes ``kv_indptr`` from ``spec_info``
when there is one, and ``bs`` from it; it then builds the CPU copy of the index pointer from
the batch's ``seq_lens_cpu``. A padded idle batch under DP attention has ``P`` rows of
``seq_lens_cpu`` (1 each) while its idle input describes none: ``P`` cumulative lengths do not
fit the empty slice once ``P > 1``. The guard sums ``seq_lens_cpu[:bs]``, the rows
``kv_indptr`` has. Wherever ``seq_lens_cpu`` already has ``bs`` rows (every batch but a padded
idle one) the slice is the whole tensor; the idle inputs alone cannot fix this, since they are
built before the batch is padded.
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11.concerns import ATTENTION_BACKENDS
from sglang_eagle_sizing.families.release_0_5_11.sites import FLASHINFER_DECODE
from sglang_eagle_sizing.syntax import code_of, dotted, same_expression, statement, with_comment

OVERRIDE = "global_override_indptr_cpu"
LABEL = "idle-flashinfer"
COMMENT = (
    "A padded idle batch (DP attention) has more rows than its idle input's",
    "kv_indptr describes (none): the override covers the rows kv_indptr has.",
)


def _override_assignment(node: cst.CSTNode) -> cst.Call | None:
    """``torch.cumsum(...)`` of ``global_override_indptr_cpu[1 : bs + 1] = torch.cumsum(...)``."""
    if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
        return None
    target = node.targets[0].target
    if not (isinstance(target, cst.Subscript) and dotted(target.value) == OVERRIDE):
        return None
    value = node.value
    if isinstance(value, cst.Call) and dotted(value.func) == "torch.cumsum" and value.args:
        return value
    return None


class FlashInferIdleRule(Rule):
    concerns = (ATTENTION_BACKENDS,)
    files = frozenset({FLASHINFER_DECODE[0]})
    needles = (OVERRIDE,)

    def __init__(self, file: str):
        super().__init__(file)
        self._found = False
        self._guarded_statement = False

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign):
        if self.scope != FLASHINFER_DECODE[1]:
            return updated_node
        call = _override_assignment(original_node)
        if call is None:
            return updated_node
        if self._found:
            raise self.fail(original_node, f"{self.scope}: {OVERRIDE} is assigned twice")
        self._found = True
        lengths = call.args[0].value
        if same_expression(lengths, "seq_lens_cpu[:bs]"):
            self.report(original_node, LABEL, Finding.ROUTED)
            return updated_node
        if not same_expression(lengths, "seq_lens_cpu"):
            raise self.fail(
                original_node,
                f"{self.scope}: {OVERRIDE} summed from {code_of(lengths)!r}, "
                "expected seq_lens_cpu",
            )
        self.report(original_node, LABEL, Finding.UNROUTED)
        self._guarded_statement = True
        new_call = updated_node.value.with_changes(
            args=[
                updated_node.value.args[0].with_changes(
                    value=cst.parse_expression("seq_lens_cpu[:bs]")
                ),
                *updated_node.value.args[1:],
            ]
        )
        return updated_node.with_changes(value=new_call)

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if not self._guarded_statement:
            return updated_node
        self._guarded_statement = False
        # Black lays the longer line out as SGLang's formatter would.
        formatted = statement(
            code_of(updated_node.with_changes(leading_lines=[])),
            self.column_of(original_node),
        ).with_changes(leading_lines=updated_node.leading_lines)
        return with_comment(formatted, *COMMENT, column=self.column_of(original_node))

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == FLASHINFER_DECODE[1] and not self._found:
            raise self.fail(original_node, f"{scope}: no {OVERRIDE}[...] = torch.cumsum(...)")
        return updated_node
