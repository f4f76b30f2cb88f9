"""``gemma3-aux-residual``: Gemma-3's model hands the EAGLE-3 drafter the hidden states it was
trained on: each capture in ``Gemma3TextModel.forward`` takes the layer's output, the branch
its decoder layer returns plus the residual stream it returns beside it (a new tensor, which
the next layer's fused add-norm cannot overwrite), not the branch alone.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.engine import Finding
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import GEMMA3_CAPTURE
from sglang_eagle_sizing.families.release_0_5_23.rules.base import ScopedRule
from sglang_eagle_sizing.families.release_0_5_23.rules.capture_contract import release_fact
from sglang_eagle_sizing.families.release_0_5_23.sites import GEMMA3_AUX
from sglang_eagle_sizing.syntax import code_of, dotted, same_expression, statement

RELEASED = "aux_hidden_states.append(hidden_states)"
LABEL = "gemma3-aux-residual"


def _appends(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.Call)
        and dotted(stmt.body[0].value.func) == "aux_hidden_states.append"
    )


class Gemma3AuxResidualRule(ScopedRule):
    """Every ``aux_hidden_states.append(hidden_states)`` of ``Gemma3TextModel.forward`` (one
    per layer loop, one after them for the last layer's output) appends
    ``inserted.GEMMA3_CAPTURE``; an append of another shape is reported. Where the forward
    binds no ``residual`` (before 0.5.17 the layer returns the whole stream: the release's
    ``gemma3_residual`` fact), each capture is already the layer's output: nothing to do."""

    concerns = (concerns.GEMMA3_AUX_RESIDUAL,)
    places = (GEMMA3_AUX,)
    files = frozenset({GEMMA3_AUX[0]})
    needles = ("aux_hidden_states.append",)
    reads = "the aux hidden states are captured there"

    def __init__(self, file: str):
        super().__init__(file)
        self.captures = 0

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if self.scope != GEMMA3_AUX[1] or not _appends(original_node):
            return updated_node
        if not release_fact("gemma3_residual"):
            return updated_node
        self.captures += 1
        value = original_node.body[0].value
        if same_expression(value, GEMMA3_CAPTURE):
            self.report(original_node, LABEL, Finding.ROUTED)
            return updated_node
        if not same_expression(value, RELEASED):
            raise self.fail(
                original_node,
                f"{GEMMA3_AUX[1]}: {code_of(value).strip()}, an aux capture the rule does not know",
            )
        self.report(original_node, LABEL, Finding.UNROUTED)
        return statement(GEMMA3_CAPTURE + "\n", self.column_of(original_node)).with_changes(
            leading_lines=original_node.leading_lines
        )

    def finish(self, module: cst.Module) -> None:
        super().finish(module)
        if not self.captures and release_fact("gemma3_residual"):
            raise self.fail(module, f"{GEMMA3_AUX[1]}: no aux_hidden_states.append")
