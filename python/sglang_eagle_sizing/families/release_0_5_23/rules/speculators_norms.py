"""``speculators-norms``: the mid layer honours ``norm_before_residual``.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing import shared
from sglang_eagle_sizing.engine import Finding
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import NORM_BEFORE_RESIDUAL_FLAG
from sglang_eagle_sizing.families.release_0_5_23.rules.base import ScopedRule
from sglang_eagle_sizing.families.release_0_5_23.sites import DRAFTER_LAYER
from sglang_eagle_sizing.syntax import assigns, dotted, flat, line_is, statements_with_comments


class NormBeforeResidualRule(ScopedRule):
    """The EAGLE-3 drafter's input layer takes its residual after ``hidden_norm`` when the
    config says ``norm_before_residual``: the flag read after ``self.hidden_norm = ...`` in
    ``LlamaDecoderLayer.__init__`` (``NORM_BEFORE_RESIDUAL_FLAG``), and 0.5.11's two lines
    (``inserted.NORM_BEFORE_RESIDUAL``) after ``hidden_states = self.hidden_norm(hidden_states)``
    in ``forward``'s ``if self.is_input_layer:`` branch, right after ``residual =
    hidden_states``. Any other shape is reported: the rule does not guess the residual."""

    concerns = (concerns.SPECULATORS_NORMS,)
    files = frozenset({DRAFTER_LAYER[0]})
    places = (
        (DRAFTER_LAYER[0], f"{DRAFTER_LAYER[1]}.__init__"),
        (DRAFTER_LAYER[0], f"{DRAFTER_LAYER[1]}.forward"),
    )
    reads = "norm_before_residual is read there"
    # No needle: a file without `hidden_norm` is reported by the places, not skipped.

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        init, forward = (scope_ for _, scope_ in self.places)
        if scope == init:
            return self._after(
                scope, original_node, updated_node,
                lambda s: assigns(s, "self.hidden_norm"), NORM_BEFORE_RESIDUAL_FLAG,
                "no `self.hidden_norm = ...` to read norm_before_residual after",
            )
        if scope == forward:
            branch = _input_layer_branch(updated_node.body.body)
            if branch is None:
                raise self.fail(
                    original_node,
                    f"{scope}: no `if self.is_input_layer:` branch (the input layer's "
                    "residual is chosen there)",
                )
            index, branch = branch
            original_branch = original_node.body.body[index]
            new_branch = self._after(
                scope, original_branch, branch, _normed_after_raw_residual(branch),
                shared.NORM_BEFORE_RESIDUAL,
                "the input layer's branch does not take `residual = hidden_states` then "
                "`hidden_states = self.hidden_norm(hidden_states)`",
            )
            body = list(updated_node.body.body)
            body[index] = new_branch
            return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        return updated_node

    def _after(self, scope, original_node, updated_node, is_anchor, source, missing):
        """``source`` right after the one statement of ``updated_node``'s block that
        ``is_anchor``."""
        body = list(updated_node.body.body)
        anchors = [i for i, stmt in enumerate(body) if is_anchor(stmt)]
        if len(anchors) != 1:
            raise self.fail(original_node, f"{scope}: {missing}")
        (index,) = anchors
        original = original_node.body.body[index]
        new = statements_with_comments(source, self.column_of(original))
        following = body[index + 1 : index + 1 + len(new)]
        if [flat(s.with_changes(leading_lines=[])) for s in following] == [
            flat(s.with_changes(leading_lines=[])) for s in new
        ]:
            self.report(original, LABEL_NORMS, Finding.ROUTED, scope)
            return updated_node
        self.report(original, LABEL_NORMS, Finding.UNROUTED, scope)
        body[index + 1 : index + 1] = new
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))


def _input_layer_branch(body) -> tuple[int, cst.If] | None:
    """(index, the statement) of the one top-level ``if self.is_input_layer:``."""
    found = [
        (i, stmt)
        for i, stmt in enumerate(body)
        if isinstance(stmt, cst.If) and dotted(stmt.test) == "self.is_input_layer"
    ]
    return found[0] if len(found) == 1 else None


def _normed_after_raw_residual(branch: cst.If):
    """The anchor of the input layer's branch: ``hidden_states =
    self.hidden_norm(hidden_states)`` right after ``residual = hidden_states``."""
    body = list(branch.body.body)

    def is_anchor(stmt):
        index = body.index(stmt)
        return (
            index > 0
            and line_is(stmt, "hidden_states = self.hidden_norm(hidden_states)")
            and line_is(body[index - 1], "residual = hidden_states")
        )

    return is_anchor


LABEL_NORMS = "norm-before-residual"
