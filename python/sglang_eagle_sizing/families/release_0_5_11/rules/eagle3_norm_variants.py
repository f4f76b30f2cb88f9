"""The EAGLE-3 drafter's norm variants: what its config declares, its forward computes.

Drafters trained with the speculators library may declare, at the top level of their config,
``norm_before_residual``, ``norm_before_fc``, ``fc_norm`` and ``norm_output`` (NVIDIA's keep
``norm_before_fc`` in ``eagle_config``: ``get_eagle3_norm_flag`` reads both places); 0.5.11's
``models/llama_eagle3.py`` reads none of them, so such a drafter computes another function
than the one it was trained as. The rule, in that file:

- ``LlamaDecoderLayer.__init__`` / ``forward``: after ``self.hidden_norm = ...`` the flag,
  after ``hidden_states = self.hidden_norm(hidden_states)`` the residual it chooses;
- ``LlamaModel.__init__``: after ``self.fc = ...``, the norms of fc's input and the
  ``norm_output`` flag (``inserted.FC_NORMS``);
- ``LlamaModel``: every ``self.fc(x)`` becomes ``self.apply_fc(x)`` (added after
  ``project_hidden_states``, else after ``forward``), which applies those norms first;
- ``LlamaModel.forward``: after ``self.norm(hidden_states, residual)``, ``norm_output``
  chooses the hidden states the next draft step reads.

An anchor that is missing is an error: the rule does not guess.
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11 import inserted
from sglang_eagle_sizing.families.release_0_5_11.concerns import EAGLE3_NORM_VARIANTS
from sglang_eagle_sizing.families.release_0_5_11.sites import SITES, Kind
from sglang_eagle_sizing.syntax import (
    assigns,
    dotted,
    flat,
    line_is,
    statements,
    statements_with_comments,
)

FILE = next(s.file for s in SITES if s.kind is Kind.DRAFTER_FC)
LAYER = "LlamaDecoderLayer"
MODEL = "LlamaModel"
LABEL = "eagle3-norm-variants"
FLAG_FUNCTION = "get_eagle3_norm_flag"


def _unpacks_norm(stmt: cst.CSTNode) -> bool:
    """``hidden_states_to_logits, hidden_states_to_aux = self.norm(hidden_states, residual)``."""
    return line_is(
        stmt,
        "hidden_states_to_logits, hidden_states_to_aux = self.norm(hidden_states, residual)",
    )


#: (scope, which statement the insertion follows, what is inserted)
ANCHORS = (
    (f"{LAYER}.__init__", lambda s: assigns(s, "self.hidden_norm"), inserted.NORM_BEFORE_RESIDUAL_FLAG),
    (
        f"{LAYER}.forward",
        lambda s: line_is(s, "hidden_states = self.hidden_norm(hidden_states)"),
        inserted.NORM_BEFORE_RESIDUAL,
    ),
    (f"{MODEL}.__init__", lambda s: assigns(s, "self.fc"), inserted.FC_NORMS),
    (f"{MODEL}.forward", _unpacks_norm, inserted.NORM_OUTPUT),
)


class _FcCalls(cst.CSTTransformer):
    """``self.fc(x)`` -> ``self.apply_fc(x)``."""

    def leave_Call(self, original_node, updated_node):
        if dotted(updated_node.func) == "self.fc":
            return updated_node.with_changes(func=cst.parse_expression(inserted.APPLY_FC))
        return updated_node


class Eagle3NormVariantsRule(Rule):
    concerns = (EAGLE3_NORM_VARIANTS,)
    files = frozenset({FILE})
    needles = ("hidden_norm",)

    def __init__(self, file: str):
        super().__init__(file)
        self._found: set[str] = set()
        self._rewrote: set[str] = set()

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        for anchor_scope, is_anchor, source in ANCHORS:
            if scope == anchor_scope:
                return self._insert_after(scope, original_node, updated_node, is_anchor, source)
        return updated_node

    def _insert_after(self, scope, original_node, updated_node, is_anchor, source):
        body = list(updated_node.body.body)
        for index, stmt in enumerate(body):
            if not is_anchor(stmt):
                continue
            self._found.add(scope)
            original = original_node.body.body[index]
            column = self.column_of(original)
            new = statements_with_comments(source, column)
            following = body[index + 1 : index + 1 + len(new)]
            if [flat(s.with_changes(leading_lines=[])) for s in following] == [
                flat(s.with_changes(leading_lines=[])) for s in new
            ]:
                self.report(original, LABEL, Finding.ROUTED, scope)
                return updated_node
            self.report(original, LABEL, Finding.UNROUTED, scope)
            self._rewrote.add(scope)
            body[index + 1 : index + 1] = new
            return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        raise self.fail(original_node, f"{scope}: not found where {LABEL} inserts")

    def leave_ClassDef(self, original_node, updated_node):
        top = len(self._scope) == 1
        name = original_node.name.value
        updated_node = super().leave_ClassDef(original_node, updated_node)
        if not top or name != MODEL or f"{MODEL}.__init__" not in self._rewrote:
            return updated_node
        body = [
            stmt if not isinstance(stmt, cst.FunctionDef) else stmt.visit(_FcCalls())
            for stmt in updated_node.body.body
        ]
        names = [n.name.value if isinstance(n, cst.FunctionDef) else None for n in body]
        after = "project_hidden_states" if "project_hidden_states" in names else "forward"
        (shown_in_class,) = statements(inserted.APPLY_FC_METHOD)
        (method,) = shown_in_class.body.body
        method = method.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        body.insert(names.index(after) + 1, method)
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))

    def leave_Module(self, original_node, updated_node):
        if not self._rewrote:
            return updated_node
        body = list(updated_node.body)
        names = [getattr(getattr(n, "name", None), "value", None) for n in body]
        if FLAG_FUNCTION in names:
            return updated_node
        first_class = next(i for i, n in enumerate(body) if isinstance(n, cst.ClassDef))
        new = statements(inserted.NORM_FLAG_FUNCTION)
        new[0] = new[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        body[first_class] = body[first_class].with_changes(
            leading_lines=[cst.EmptyLine(), cst.EmptyLine()]
        )
        body[first_class:first_class] = new
        return updated_node.with_changes(body=body)

    def finish(self, module: cst.Module) -> None:
        missing = [scope for scope, _, _ in ANCHORS if scope not in self._found]
        if missing:
            raise self.fail(module, f"{missing[0]}: not found where {LABEL} inserts")

