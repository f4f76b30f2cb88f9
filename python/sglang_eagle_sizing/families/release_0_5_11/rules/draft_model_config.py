"""``TpModelWorker`` takes the ``ModelConfig`` an EAGLE worker already built.

Each EAGLE worker builds its drafter's ``ModelConfig`` at start-up, before the draft model, to
read and check it (``rules/aux_flag.py``), and hands it to the draft ``TpModelWorker`` it builds
(``model_config=draft_model_config``), which uses it instead of building the same config a
second time. ``TpModelWorker.__init__`` gets the keyword ``model_config`` (default ``None``:
it builds its own, as before) and ``ModelConfig`` is imported under ``TYPE_CHECKING`` (the
module has ``from __future__ import annotations``).
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11.concerns import PARSER
from sglang_eagle_sizing.families.release_0_5_11.sites import DRAFT_MODEL_CONFIG_WORKER
from sglang_eagle_sizing.syntax import dotted, statement, statements

FILE, SCOPE = DRAFT_MODEL_CONFIG_WORKER
PARAMETER = "model_config"
BUILD = "self._init_model_config()"
TAKE_OR_BUILD = f"""\
if {PARAMETER} is None:
    {BUILD}
else:
    # Built by an EAGLE worker, which checks the draft config first.
    self.model_config = {PARAMETER}
"""
IMPORT = "from sglang.srt.configs.model_config import ModelConfig\n"


def _is_build(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, cst.Call)
        and dotted(stmt.body[0].value.func) == "self._init_model_config"
        and not stmt.body[0].value.args
    )


class DraftModelConfigRule(Rule):
    concerns = (PARSER,)
    files = frozenset({FILE})

    def __init__(self, file: str):
        super().__init__(file)
        self.changed = False

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope != SCOPE:
            return updated_node
        params = updated_node.params
        names = [p.name.value for p in params.params]
        body = list(updated_node.body.body)
        builds = [i for i, s in enumerate(body) if _is_build(s)]
        if PARAMETER in names:
            if builds:
                raise self.fail(original_node, f"{scope}: takes {PARAMETER} but ignores it")
            self.report(original_node, "draft-model-config", Finding.ROUTED, scope)
            return updated_node
        if len(builds) != 1 or params.star_kwarg is not None or params.kwonly_params:
            raise self.fail(
                original_node,
                f"{scope}: not one {BUILD} in a signature the rule knows",
            )
        original_build = original_node.body.body[builds[0]]
        self.report(original_build, "draft-model-config", Finding.UNROUTED, scope)
        last = params.params[-1]
        new = cst.Param(
            name=cst.Name(PARAMETER),
            annotation=cst.Annotation(cst.parse_expression("Optional[ModelConfig]")),
            default=cst.Name("None"),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(" "),
                whitespace_after=cst.SimpleWhitespace(" "),
            ),
            comma=last.comma,
        )
        before_last = (
            params.params[-2].comma if len(params.params) > 1 else cst.MaybeSentinel.DEFAULT
        )
        params = params.with_changes(
            params=[*params.params[:-1], last.with_changes(comma=before_last), new]
        )
        index = builds[0]
        replacement = statement(TAKE_OR_BUILD, self.column_of(original_build))
        replacement = replacement.with_changes(leading_lines=body[index].leading_lines)
        body[index] = replacement
        self.changed = True
        return updated_node.with_changes(
            params=params, body=updated_node.body.with_changes(body=body)
        )

    def leave_Module(self, original_node, updated_node):
        if not self.changed:
            return updated_node
        body = list(updated_node.body)
        for index, stmt in enumerate(body):
            if isinstance(stmt, cst.If) and dotted(stmt.test) == "TYPE_CHECKING":
                block = list(stmt.body.body)
                block.insert(0, statements(IMPORT, 4)[0])
                body[index] = stmt.with_changes(body=stmt.body.with_changes(body=block))
                return updated_node.with_changes(body=body)
        raise self.fail(original_node, "no `if TYPE_CHECKING:` block to import ModelConfig in")
