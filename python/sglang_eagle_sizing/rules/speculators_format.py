"""EAGLE-3 drafters saved by the speculators library load as ``LlamaForCausalLMEagle3``.

The speculators format (``architectures: ["Eagle3DraftModel"]``, ``["Eagle3Speculator"]`` in
its early releases) is not a model type transformers knows, so 0.5.11's ``get_config`` fails
on it, and its weights name the decoder layer ``layers.0.`` where ``llama_eagle3.py`` has
``midlayer.``. Two rules:

- ``SpeculatorsConfigRule``, in the module that defines ``get_config``
  (``utils/hf_transformers/config.py`` from 0.5.11, ``utils/hf_transformers_utils.py``
  before): the functions of ``inserted.SPECULATORS_CONFIG_FUNCTIONS`` before ``get_config``,
  and the first ``if`` of ``get_config`` that reads the config (the one holding
  ``AutoConfig.from_pretrained``) becomes the ``elif`` of a branch that reads the
  speculators format;
- ``SpeculatorsWeightNamesRule``: ``LlamaForCausalLMEagle3.load_weights`` reads
  ``layers.0.`` as ``midlayer.`` (``inserted.SPECULATORS_WEIGHT_NAME``).
"""

from __future__ import annotations

import libcst as cst

from .. import inserted
from ..concerns import SPECULATORS_FORMAT
from ..engine import Finding, Rule
from ..sites import GET_CONFIG_FILES, SITES, Kind
from ..syntax import code_of, dotted, statement, statements, statements_with_comments

FUNCTION = "get_config"
HELPER = "is_speculators_eagle3_config"
DRAFTER_FILE = next(s.file for s in SITES if s.kind is Kind.DRAFTER_FC)
LOAD_WEIGHTS = "LlamaForCausalLMEagle3.load_weights"


def _holds_call(node: cst.CSTNode, name: str) -> bool:
    found = []

    class Visitor(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if dotted(call.func) == name:
                found.append(call)

    node.visit(Visitor())
    return bool(found)


class SpeculatorsConfigRule(Rule):
    concerns = (SPECULATORS_FORMAT,)
    files = frozenset(GET_CONFIG_FILES)
    needles = (f"def {FUNCTION}(",)

    def __init__(self, file: str):
        super().__init__(file)
        self._found = False

    def leave_FunctionDef(self, original_node, updated_node):
        top = not self._scope[:-1]
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if not top or original_node.name.value != FUNCTION:
            return updated_node
        body = list(updated_node.body.body)
        for index, stmt in enumerate(body):
            if not isinstance(stmt, cst.If):
                continue
            if _holds_call(stmt.test, inserted.SPECULATORS_CONFIG_TEST.split("(")[0]):
                self._found = True
                self.report(original_node.body.body[index], "speculators-config", Finding.ROUTED, FUNCTION)
                return updated_node
            if not _holds_call(stmt, "AutoConfig.from_pretrained"):
                continue
            self._found = True
            self.report(original_node.body.body[index], "speculators-config", Finding.UNROUTED, FUNCTION)
            load = statement(inserted.SPECULATORS_CONFIG_LOAD, 4)
            body[index] = cst.If(
                test=cst.parse_expression(inserted.SPECULATORS_CONFIG_TEST),
                body=cst.IndentedBlock(body=[load]),
                orelse=stmt.with_changes(leading_lines=[]),
                leading_lines=stmt.leading_lines,
            )
            return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        raise self.fail(original_node, f"{FUNCTION}: no if that reads the config")

    def leave_Module(self, original_node, updated_node):
        if not self._found:
            return updated_node
        body = list(updated_node.body)
        names = [n.name.value if isinstance(n, cst.FunctionDef) else None for n in body]
        if HELPER in names:
            return updated_node
        new = statements(inserted.SPECULATORS_CONFIG_FUNCTIONS)
        new[0] = new[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        at = names.index(FUNCTION)
        body[at] = body[at].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
        body[at:at] = new
        return updated_node.with_changes(body=body)

    def finish(self, module: cst.Module) -> None:
        if not self._found:
            raise self.fail(module, f"{FUNCTION}: not found")


def _is_weights_loop(stmt: cst.CSTNode) -> bool:
    return (
        isinstance(stmt, cst.For)
        and "".join(code_of(stmt.target).split()) == "name,loaded_weight"
        and dotted(stmt.iter) == "weights"
    )


class SpeculatorsWeightNamesRule(Rule):
    concerns = (SPECULATORS_FORMAT,)
    files = frozenset({DRAFTER_FILE})
    needles = ("def load_weights",)

    def __init__(self, file: str):
        super().__init__(file)
        self._found = False

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope != LOAD_WEIGHTS:
            return updated_node
        body = list(updated_node.body.body)
        for index, stmt in enumerate(body):
            if not _is_weights_loop(stmt):
                continue
            self._found = True
            original = original_node.body.body[index]
            loop_body = list(stmt.body.body)
            new = statements_with_comments(
                inserted.SPECULATORS_WEIGHT_NAME, self.column_of(original) + 4
            )
            first = "".join(code_of(new[0].with_changes(leading_lines=[])).split())
            if loop_body and "".join(code_of(loop_body[0].with_changes(leading_lines=[])).split()) == first:
                self.report(original, "speculators-weight-names", Finding.ROUTED)
                return updated_node
            self.report(original, "speculators-weight-names", Finding.UNROUTED)
            loop = stmt.with_changes(body=stmt.body.with_changes(body=[*new, *loop_body]))
            body[index] = loop
            return updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        raise self.fail(original_node, f"{LOAD_WEIGHTS}: no loop over the weights")

    def finish(self, module: cst.Module) -> None:
        if not self._found:
            raise self.fail(module, f"{LOAD_WEIGHTS}: not found")
