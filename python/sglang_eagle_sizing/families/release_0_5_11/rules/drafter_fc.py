"""The EAGLE-3 drafter's ``fc`` takes what the target produces: the drafter's aux layers.

0.5.11's ``models/llama_eagle3.py`` builds ``self.fc = torch.nn.Linear(self.hidden_size_in * 3,
...)`` whatever the drafter declares, and its forward applies ``fc`` whenever the hidden
states are not as wide as the embeddings. The rule, in ``LlamaModel``:

- ``__init__``: the ``* 3`` of ``fc``'s input width becomes
  ``* get_eagle_num_aux_hidden_states(config)`` and ``self.use_aux_hidden_state`` is parsed
  right before it, by the one parser; the import rule imports it from ``spec_info`` at the
  top of the module (``spec_info`` imports no scheduler module, ``eagle_info`` does);
- ``forward``: the width test becomes ``self.project_hidden_states(...)``, which decides by
  the step (``inserted.DRAFTER_FC_METHOD``), added after ``forward``.

Any other ``torch.nn.Linear`` assigned to ``self.fc``, or a forward that applies ``fc`` in
another form, is an error: the rule does not guess.
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11 import inserted
from sglang_eagle_sizing.families.release_0_5_11.concerns import DRAFTER_FC
from sglang_eagle_sizing.families.release_0_5_11.sites import SITES, Kind
from sglang_eagle_sizing.syntax import (
    code_of,
    dotted,
    same_expression,
    statement,
    statements,
    statements_with_comments,
)

(SITE,) = [s for s in SITES if s.kind is Kind.DRAFTER_FC]
CLASS = SITE.scope.split(".")[0]
INIT = SITE.scope
FORWARD = f"{CLASS}.forward"
METHOD = "project_hidden_states"
RELEASE_WIDTH = "self.hidden_size_in * 3"
RELEASE_TEST = "hidden_states.shape[-1] != embeds.shape[-1]"


def _fc_linear(stmt: cst.CSTNode) -> cst.Call | None:
    """``torch.nn.Linear(...)`` of a line ``self.fc = torch.nn.Linear(...)``."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    node = stmt.body[0]
    if not (
        isinstance(node, cst.Assign)
        and len(node.targets) == 1
        and dotted(node.targets[0].target) == "self.fc"
    ):
        return None
    if isinstance(node.value, cst.Call) and dotted(node.value.func) in (
        "torch.nn.Linear",
        "nn.Linear",
    ):
        return node.value
    return None


def _is_release_fc_if(stmt: cst.CSTNode) -> bool:
    """``if hidden_states.shape[-1] != embeds.shape[-1]: hidden_states = self.fc(...)``."""
    if not isinstance(stmt, cst.If) or stmt.orelse is not None:
        return False
    body = stmt.body.body
    return (
        same_expression(stmt.test, RELEASE_TEST)
        and len(body) == 1
        and isinstance(body[0], cst.SimpleStatementLine)
        and len(body[0].body) == 1
        and _same_statement(body[0].body[0], "hidden_states = self.fc(hidden_states)")
    )


def _same_statement(node: cst.CSTNode, source: str) -> bool:
    """Whether a small statement is ``source``, whitespace aside."""
    return "".join(code_of(node).split()) == "".join(source.split())


def _calls_fc(node: cst.CSTNode) -> bool:
    found = []

    class Visitor(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if dotted(call.func) == "self.fc":
                found.append(call)

    node.visit(Visitor())
    return bool(found)


class DrafterFcRule(Rule):
    concerns = (DRAFTER_FC,)
    files = frozenset({SITE.file})
    needles = ("self.fc",)

    def __init__(self, file: str):
        super().__init__(file)
        self._fc_built = False
        self._fc_applied = False
        self._rewrote_forward = False

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == INIT:
            return self._init(original_node, updated_node)
        if scope == FORWARD:
            return self._forward(original_node, updated_node)
        return updated_node

    def _init(self, original_node, updated_node):
        body = list(updated_node.body.body)
        original_body = list(original_node.body.body)
        for index, stmt in enumerate(body):
            linear = _fc_linear(stmt)
            if linear is None:
                continue
            self._fc_built = True
            width = linear.args[0].value if linear.args and not linear.args[0].keyword else None
            if width is not None and same_expression(width, inserted.DRAFTER_FC_WIDTH):
                self.report(original_body[index], "extend", Finding.ROUTED, INIT)
                return updated_node
            if width is None or not same_expression(width, RELEASE_WIDTH):
                # Another width than 0.5.11's: reported, left as it is (apply stops).
                self.report(original_body[index], "extend", Finding.UNKNOWN, INIT)
                return updated_node
            self.report(original_body[index], "extend", Finding.UNROUTED, INIT)
            column = self.column_of(original_body[index])
            new_linear = linear.with_changes(
                args=[
                    linear.args[0].with_changes(
                        value=cst.parse_expression(inserted.DRAFTER_FC_WIDTH)
                    ),
                    *linear.args[1:],
                ]
            )
            new_fc = statement(
                code_of(stmt.with_changes(leading_lines=[]).deep_replace(linear, new_linear)),
                column,
            )
            new = statements_with_comments(inserted.DRAFTER_FC_FLAG, column)
            new[0] = new[0].with_changes(
                leading_lines=[*stmt.leading_lines, *new[0].leading_lines]
            )
            new.append(new_fc)
            body[index : index + 1] = new
            return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        raise self.fail(original_node, f"{INIT}: no self.fc = torch.nn.Linear(...)")

    def _forward(self, original_node, updated_node):
        body = list(updated_node.body.body)
        original_body = list(original_node.body.body)
        for index, stmt in enumerate(body):
            if isinstance(stmt, cst.SimpleStatementLine) and _same_statement(
                stmt.body[0], inserted.DRAFTER_FC_CALL
            ):
                self._fc_applied = True
                self.report(original_body[index], "drafter-fc-forward", Finding.ROUTED, FORWARD)
                return updated_node
            if _is_release_fc_if(stmt):
                self._fc_applied = True
                self.report(original_body[index], "drafter-fc-forward", Finding.UNROUTED, FORWARD)
                self._rewrote_forward = True
                new = statement(inserted.DRAFTER_FC_CALL + "\n", self.column_of(original_body[index]))
                body[index] = new.with_changes(leading_lines=stmt.leading_lines)
                return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
            if _calls_fc(stmt):
                # fc applied in a form the rule does not know: reported, left as it is.
                self._fc_applied = True
                self.report(original_body[index], "drafter-fc-forward", Finding.UNKNOWN, FORWARD)
                return updated_node
        raise self.fail(original_node, f"{FORWARD}: fc is never applied")

    def leave_ClassDef(self, original_node, updated_node):
        is_model = original_node.name.value == CLASS and len(self._scope) == 1
        updated_node = super().leave_ClassDef(original_node, updated_node)
        if not is_model:
            return updated_node
        if not (self._fc_built and self._fc_applied):
            raise self.fail(original_node, f"{CLASS}: fc not built and applied in __init__/forward")
        body = list(updated_node.body.body)
        names = [n.name.value for n in body if isinstance(n, cst.FunctionDef)]
        if METHOD in names or not self._rewrote_forward:
            return updated_node
        (shown_in_class,) = statements(inserted.DRAFTER_FC_METHOD)
        (method,) = shown_in_class.body.body
        method = method.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        index = next(
            i for i, n in enumerate(body) if isinstance(n, cst.FunctionDef) and n.name.value == "forward"
        )
        body.insert(index + 1, method)
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
