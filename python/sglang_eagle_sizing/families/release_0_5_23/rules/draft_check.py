"""``draft-check``: the drafter is checked before its weights load
(``validate_eagle3_draft_config``), and each model class's capture is checked against what the
drafter declares.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.engine import Finding
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    CAPTURE,
    FINAL_HIDDEN_STATE_FLAG,
    FINAL_HIDDEN_STATE_TEXT,
    INDICES_FIELD,
    VALIDATE,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.base import (
    ClassRule,
    OneStatementRule,
    ScopedRule,
    calls_to,
    parsed_into,
)
from sglang_eagle_sizing.families.release_0_5_23.sites import (
    CAPTURE_CALL,
    FINAL_HIDDEN_STATE_MODELS,
    TARGET_CAPTURE,
)
from sglang_eagle_sizing.shared import layer_ids_owner
from sglang_eagle_sizing.syntax import (
    assigns,
    code_of,
    contains,
    dotted,
    same_expression,
    statement,
    statements_with_comments,
)


class DraftCheckRule(ScopedRule):
    """The target checks the drafter it captures for, right after parsing its config
    (before any weights load): ``validate_eagle3_draft_config``."""

    concerns = (concerns.DRAFT_CHECK,)
    places = (TARGET_CAPTURE,)
    files = frozenset({TARGET_CAPTURE[0]})
    needles = ("eagle_aux_hidden_state_layer_ids",)

    def __init__(self, file: str):
        super().__init__(file)
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        super().visit_FunctionDef(node)
        if self.scope == TARGET_CAPTURE[1]:
            names = {p.name.value for p in (*node.params.params, *node.params.kwonly_params)}
            if TARGET_MODEL_CONFIG not in names:
                raise self.fail(node, f"{self.scope}: no {TARGET_MODEL_CONFIG} parameter")
        return True

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != TARGET_CAPTURE[1]:
            return updated_node
        body = list(updated_node.body)
        for index, stmt in enumerate(body):
            if contains(stmt, _validate_call):
                self.found = True
                self.report(original_node.body[min(index, len(original_node.body) - 1)], LABEL_CHECK, Finding.ROUTED)
                return updated_node
        for index, stmt in enumerate(body):
            parsed = parsed_into(stmt)
            if parsed is None and not (
                isinstance(stmt, cst.Try) and layer_ids_owner(stmt) is not None
            ):
                continue
            self.found = True
            if index < len(original_node.body):
                self.report(original_node.body[index], LABEL_CHECK, Finding.UNROUTED)
            if parsed is None:  # the check pass: the capture is not parsed yet
                return updated_node
            name, source = parsed
            new = statement(
                f"{VALIDATE}(\n"
                f"    {name},\n"
                f"    draft_hf_config={source},\n"
                f"    target_hf_config={TARGET_MODEL_CONFIG}.hf_text_config,\n"
                ")\n",
                self.column_of(original_node) + 4,
            )
            body.insert(index + 1, new)
            return updated_node.with_changes(body=body)
        return updated_node

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == TARGET_CAPTURE[1] and not self.found:
            raise self.fail(original_node, f"{scope}: the drafter's config was not found")
        return updated_node


LABEL_CHECK = "draft-check"


TARGET_MODEL_CONFIG = "model_config"


def _validate_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and dotted(node.func) == VALIDATE


LABEL_CAPTURE = "capture-rule"


CLASS_CAPTURE = "set_eagle3_layers_to_capture"


LAYER_IDS_PARAM = "eagle_aux_hidden_state_layer_ids"


def _with_indices() -> bool:
    return enabled(concerns.SPECULATORS_EAGLE3)


class CaptureCallRule(OneStatementRule):
    """The built target captures through ``set_eagle3_layers_to_capture`` of the added
    module (its class's own method, then a check of what that captured) instead of calling
    the class's method alone; with the speculators format, given the hidden-state indices
    a speculators drafter declares (a new keyword of ``configure_aux_hidden_state_capture``,
    after the layer ids')."""

    concerns = (concerns.DRAFT_CHECK, concerns.SPECULATORS_EAGLE3)
    place = CAPTURE_CALL
    label = LABEL_CAPTURE
    needles = (CLASS_CAPTURE,)

    def _call(self) -> str:
        extra = f", {INDICES_FIELD}" if _with_indices() else ""
        return f"{CAPTURE}(model, {LAYER_IDS_PARAM}{extra})\n"

    def routed(self, stmt: cst.CSTNode) -> bool:
        return (
            isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and same_expression(stmt.body[0].value, self._call().strip())
        )

    def rewrite(self, stmt: cst.CSTNode, column: int) -> list[cst.BaseStatement] | None:
        if not isinstance(stmt, cst.SimpleStatementLine):
            return None
        if contains(stmt, calls_to(CAPTURE)):
            raise self.fail(stmt, f"{self.place[1]}: a call of {CAPTURE} the rule does not know")
        if not contains(stmt, calls_to(f"model.{CLASS_CAPTURE}")):
            return None
        if code_of(stmt).strip() != f"model.{CLASS_CAPTURE}({LAYER_IDS_PARAM})":
            raise self.fail(stmt, f"{self.place[1]}: the class's capture called in a form the rule does not know")
        return [statement(self._call(), column)]

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope != self.place[1] or not _with_indices():
            return updated_node
        params = list(updated_node.params.kwonly_params)
        names = [p.name.value for p in params]
        if INDICES_FIELD in names:
            return updated_node
        if LAYER_IDS_PARAM not in names:
            raise self.fail(original_node, f"{scope}: no keyword {LAYER_IDS_PARAM}")
        index = names.index(LAYER_IDS_PARAM)
        new = params[index].with_changes(
            name=cst.Name(INDICES_FIELD),
            annotation=None,
            default=cst.Name("None"),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""),
                whitespace_after=cst.SimpleWhitespace(""),
            ),
        )
        params.insert(index + 1, new)
        return updated_node.with_changes(params=updated_node.params.with_changes(kwonly_params=params))


def _captures_end_layer(node: cst.CSTNode) -> bool:
    """``self.end_layer in self.layers_to_capture`` or ``num_layers in ...``."""
    return (
        isinstance(node, cst.Comparison)
        and dotted(node.left) in ("self.end_layer", "num_layers")
        and len(node.comparisons) == 1
        and isinstance(node.comparisons[0].operator, cst.In)
        and dotted(node.comparisons[0].comparator) == "self.layers_to_capture"
    )


def _comments(lines) -> list:
    return [line for line in lines if line.comment is not None]


def _blanks(lines) -> list:
    return [line for line in lines if line.comment is None]


class FinalHiddenStateRule(ClassRule):
    """The target models whose forward captures the last layer's output say so, for the
    capture check: ``captures_final_hidden_state = True`` before their first method."""

    concerns = (concerns.DRAFT_CHECK,)
    places = FINAL_HIDDEN_STATE_MODELS

    def rewrite_class(self, node, body):
        name = node.name.value
        forward = [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"]
        captures = len(forward) == 1 and contains(forward[0], _captures_end_layer)
        flag = next((s for s in node.body.body if assigns(s, FINAL_HIDDEN_STATE_FLAG)), None)
        if flag is not None:
            # the flag stays true only while the forward it speaks for captures (an upstream
            # merge may have changed the forward under it)
            if not captures:
                raise self.fail(
                    flag,
                    f"{name}: {FINAL_HIDDEN_STATE_FLAG} = True, but its forward no longer "
                    "captures the last layer's output as the rule knows (changed upstream?), "
                    "and the flag would let ids naming that output through",
                )
            self.report(node, LABEL_CAPTURE, Finding.ROUTED, name)
            return None
        if not captures:
            raise self.fail(node, f"{name}: its forward does not capture the last layer as the rule knows")
        self.report(node, LABEL_CAPTURE, Finding.UNROUTED, name)
        index = next(i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef))
        new = statements_with_comments(FINAL_HIDDEN_STATE_TEXT, 4)
        first = body[index]
        new[0] = new[0].with_changes(
            leading_lines=[*_blanks(first.leading_lines), *new[0].leading_lines]
        )
        body[index:index] = new
        body[index + len(new)] = first.with_changes(
            leading_lines=[cst.EmptyLine(indent=False), *_comments(first.leading_lines)]
        )
        return body
