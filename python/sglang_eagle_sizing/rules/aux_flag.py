"""Give every EAGLE worker a validated drafter and ``eagle_use_aux_hidden_state`` from the one
parser.

Replaces 0.5.11's inline parsing (``self.eagle_use_aux_hidden_state = False`` followed by an
``if ...is_eagle3():`` block reading ``eagle_config``) with ``validate_eagle_draft_config(...)``
(stops the worker at start-up when the drafter cannot consume what the target produces) and
``self.eagle_use_aux_hidden_state = parse_eagle_use_aux_hidden_state(...)``; adds both to the
workers that had no flag: after their draft runner(s) are set, before anything sizes a buffer.
"""

from __future__ import annotations

import libcst as cst

from ..engine import Finding, Rule
from ..sites import AUX_FLAG_WORKERS, TARGET_MODEL_CONFIG
from ..syntax import code_of, dotted, statement

FLAG = "self.eagle_use_aux_hidden_state"
PARSER = "parse_eagle_use_aux_hidden_state"
VALIDATOR = "validate_eagle_draft_config"
#: attributes after which the draft runner is in reach (the last one present wins)
RUNNER_ATTRIBUTES = ("self.draft_runner_list", "self.draft_runner")


def assigned(stmt: cst.CSTNode) -> str | None:
    """``self.x`` for ``self.x = ...`` or ``self.x: T = ...``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            return dotted(small.targets[0].target)
        if isinstance(small, cst.AnnAssign):
            return dotted(small.target)
    return None


def _contains(node: cst.CSTNode, predicate) -> bool:
    found = False

    class _Visitor(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            if predicate(n):
                found = True
            return not found

    node.visit(_Visitor())
    return found


def _eagle_config_source(node: cst.CSTNode) -> cst.BaseExpression | None:
    """``X`` in ``getattr(X, "eagle_config", ...)`` inside ``node``."""
    result = None

    class _Visitor(cst.CSTVisitor):
        def visit_Call(self, n: cst.Call) -> None:
            nonlocal result
            if (
                dotted(n.func) == "getattr"
                and len(n.args) >= 2
                and isinstance(n.args[1].value, cst.SimpleString)
                and n.args[1].value.evaluated_value == "eagle_config"
            ):
                result = n.args[0].value

    node.visit(_Visitor())
    return result


def _is_super_init(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and code_of(node.func).replace(" ", "") == "super().__init__"


class AuxFlagRule(Rule):
    files = frozenset(file for file, _ in AUX_FLAG_WORKERS)

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if len(self._scope) != 1 or original_node.name.value != "__init__":
            return updated_node
        draft_model_config = AUX_FLAG_WORKERS.get((self.file, self._scope[0]))
        if draft_model_config is None:
            return updated_node
        body = list(updated_node.body.body)
        original_body = list(original_node.body.body)
        column = self.column_of(original_body[0])

        def new_statements(config: str) -> list[cst.BaseStatement]:
            return [
                statement(
                    f"{VALIDATOR}(self.speculative_algorithm, {config}, {TARGET_MODEL_CONFIG})\n",
                    column,
                ),
                statement(
                    f"{FLAG} = {PARSER}(self.speculative_algorithm, {config}.hf_config)\n",
                    column,
                ),
            ]

        for index, stmt in enumerate(body):
            if assigned(stmt) != FLAG:
                continue
            value = stmt.body[0].value
            if isinstance(value, cst.Call) and dotted(value.func) == PARSER:
                if index > 0 and _calls(body[index - 1], VALIDATOR):
                    self.report(original_body[index], "aux-flag", Finding.ROUTED, scope)
                    return updated_node
                self.report(original_body[index], "aux-flag", Finding.UNROUTED, scope)
                body.insert(index, new_statements(draft_model_config)[0])
                return updated_node.with_changes(
                    body=updated_node.body.with_changes(body=body)
                )
            # Inline parsing: `flag = <default>` then `if ...: ... flag = ...`.
            follower = body[index + 1] if index + 1 < len(body) else None
            if not (
                isinstance(follower, cst.If)
                and _contains(
                    follower,
                    lambda n: isinstance(n, cst.Assign)
                    and any(dotted(t.target) == FLAG for t in n.targets),
                )
            ):
                raise self.fail(
                    original_body[index],
                    f"{scope}: {FLAG} set without the parser, in a form the rule does not know",
                )
            source = _eagle_config_source(follower)
            config = draft_model_config
            if source is not None and code_of(source).endswith(".hf_config"):
                config = code_of(source)[: -len(".hf_config")]
            self.report(original_body[index], "aux-flag", Finding.UNROUTED, scope)
            new = new_statements(config)
            new[0] = new[0].with_changes(leading_lines=stmt.leading_lines)
            body[index : index + 2] = new
            return updated_node.with_changes(
                body=updated_node.body.with_changes(body=body)
            )

        # No flag at all: set it once the draft runner is in reach.
        anchor = None
        for index, stmt in enumerate(body):
            if assigned(stmt) in RUNNER_ATTRIBUTES:
                anchor = index
        if anchor is None:
            for index, stmt in enumerate(body):
                if isinstance(stmt, cst.With) and _contains(stmt, _is_super_init):
                    anchor = index
        if anchor is None:
            raise self.fail(
                original_node, f"{scope}: no place where the draft runner is set"
            )
        reported = original_body[min(anchor, len(original_body) - 1)]
        self.report(reported, "aux-flag", Finding.UNROUTED, scope)
        body[anchor + 1 : anchor + 1] = new_statements(draft_model_config)
        return updated_node.with_changes(body=updated_node.body.with_changes(body=body))


def _calls(stmt: cst.CSTNode, name: str) -> bool:
    """``name(...)`` as a statement of its own."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.Call)
        and dotted(stmt.body[0].value.func) == name
    )
