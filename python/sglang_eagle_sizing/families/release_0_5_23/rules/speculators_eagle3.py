"""``speculators-eagle3``: a speculators-format EAGLE-3 drafter's config is read as the
``LlamaForCausalLMEagle3`` config it describes (its layer ids, hidden-state indices, kept at
the top level, where the parser reads them as such: ``top-level-layer-ids``).
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing import shared
from sglang_eagle_sizing.engine import Finding
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    SPECULATORS_LOADER,
    SPECULATORS_LOADER_FUNCTION,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.base import (
    ScopedRule,
    two_blank_lines,
)
from sglang_eagle_sizing.families.release_0_5_23.sites import CONFIG_READ
from sglang_eagle_sizing.syntax import (
    contains,
    dotted,
    same_expression,
    statement,
)


def _converter() -> list[cst.BaseStatement]:
    """0.5.11's converter of the format (``speculators_eagle3_to_llama_config``), alone."""
    module = cst.parse_module(shared.SPECULATORS_CONFIG_FUNCTIONS.strip() + "\n")
    return [
        f
        for f in module.body
        if isinstance(f, cst.FunctionDef) and f.name.value == CONVERTER
    ]


CONVERTER = "speculators_eagle3_to_llama_config"


class SpeculatorsConfigRule(ScopedRule):
    """EAGLE-3 drafters saved by the speculators library (no ``model_type``: ``AutoConfig``
    refuses them) read as their ``LlamaForCausalLMEagle3`` config: one more
    ``if config is None: config = _try_load_speculators_eagle3_config(...)`` in
    ``HfModelConfigParser.parse``, right before the one that calls ``AutoConfig``, the
    function (``inserted.SPECULATORS_LOADER_FUNCTION``) and the format's converter defined
    before the parser class."""

    concerns = (concerns.SPECULATORS_EAGLE3,)
    files = frozenset({CONFIG_READ[0]})
    places = (CONFIG_READ,)
    needles = (shared.AUTO_CONFIG_CALL, SPECULATORS_LOADER)
    reads = "the config is read there"

    def __init__(self, file: str):
        super().__init__(file)
        self.found = False
        #: ``parse``'s ``def``, for the line a refusal names
        self.parse_def: cst.FunctionDef | None = None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        result = super().visit_FunctionDef(node)
        if self.scope == CONFIG_READ[1] and self.parse_def is None:
            self.parse_def = node
        return result

    @staticmethod
    def _fallback_to(stmt: cst.CSTNode, name: str) -> bool:
        # `if config is None: config = <name>(...)`
        return (
            isinstance(stmt, cst.If)
            and same_expression(stmt.test, "config is None")
            and len(stmt.body.body) == 1
            and contains(stmt.body, lambda n: isinstance(n, cst.Call) and dotted(n.func) == name)
        )

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != CONFIG_READ[1]:
            return updated_node
        body = list(updated_node.body)
        for index, stmt in enumerate(body):
            if self._fallback_to(stmt, SPECULATORS_LOADER):
                self.found = True
                self.report(original_node.body[index], LABEL_SPECULATORS, Finding.ROUTED)
                return updated_node
        for index, stmt in enumerate(body):
            if not self._fallback_to(stmt, shared.AUTO_CONFIG_CALL):
                continue
            self.found = True
            self.report(original_node.body[index], LABEL_SPECULATORS, Finding.UNROUTED)
            new = statement(
                "if config is None:\n"
                f"    config = {SPECULATORS_LOADER}(model, revision, **kwargs)\n",
                self.column_of(original_node.body[index]),
            )
            body.insert(index, new)
            return updated_node.with_changes(body=body)
        return updated_node

    def leave_Module(self, original_node, updated_node):
        if not self.found:
            raise self.fail(
                self.parse_def or original_node,
                f"{CONFIG_READ[1]}: no `if config is None:` fallback to "
                f"{shared.AUTO_CONFIG_CALL}",
            )
        body = list(updated_node.body)
        names = [getattr(stmt, "name", None) for stmt in body]
        values = [n.value for n in names if n is not None]
        if SPECULATORS_LOADER in values:
            return updated_node
        owner = CONFIG_READ[1].split(".")[0]
        if values.count(owner) != 1:
            raise self.fail(original_node, f"no top-level class {owner}")
        index = next(i for i, n in enumerate(names) if n is not None and n.value == owner)
        loader = cst.parse_module(SPECULATORS_LOADER_FUNCTION.strip() + "\n").body
        functions = [
            f.with_changes(leading_lines=two_blank_lines()) for f in [*_converter(), *loader]
        ]
        body[index:index] = functions
        body[index + len(functions)] = body[index + len(functions)].with_changes(
            leading_lines=two_blank_lines()
        )
        return updated_node.with_changes(body=body)


LABEL_SPECULATORS = "speculators-config"
