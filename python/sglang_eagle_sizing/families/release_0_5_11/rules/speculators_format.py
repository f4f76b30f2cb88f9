"""EAGLE-3 drafters saved by the speculators library load as ``LlamaForCausalLMEagle3``.

The speculators format (``architectures: ["Eagle3DraftModel"]``, ``["Eagle3Speculator"]`` in
its early releases) has no ``model_type`` (speculators 0.9 strips it from config.json), so
``AutoConfig.from_pretrained`` refuses it (transformers 5: ``ValueError``, "Unrecognized
model"; transformers 4 may instead build the class of a model type named in the path), and
its weights name the decoder layer ``layers.0.`` where ``llama_eagle3.py`` has ``midlayer.``.
Two rules:

- ``SpeculatorsConfigRule``, in the module that defines ``get_config``
  (``utils/hf_transformers/config.py`` from 0.5.11, ``utils/hf_transformers_utils.py``
  before): the functions of ``inserted.SPECULATORS_CONFIG_FUNCTIONS`` before ``get_config``,
  and the ``try`` of ``get_config`` whose body is ``config = AutoConfig.from_pretrained(...)``
  calls ``auto_config_or_speculators_eagle3`` instead, with the same arguments. The format is
  detected where the config is read: a config ``AutoConfig`` reads costs nothing more (an
  attribute test), and only one it refuses is read again, as a dict, and converted if it is
  the format, else the original error is re-raised to the ``except`` of the release, whatever
  its shape (0.5.9: ``except ValueError``; 0.5.10: ``ValueError`` then ``KeyError``; 0.5.11:
  ``except (ValueError, KeyError) as e``). No model pays a second read of its config to be
  probed for the format. An ``AutoConfig.from_pretrained`` of ``get_config`` in another
  shape is reported as unknown (the file is left as it is);
- ``SpeculatorsWeightNamesRule``: ``LlamaForCausalLMEagle3.load_weights`` reads
  ``layers.0.`` as ``midlayer.`` (``inserted.SPECULATORS_WEIGHT_NAME``).
"""

from __future__ import annotations

import libcst as cst
from sglang_eagle_sizing.engine import Finding, Rule
from sglang_eagle_sizing.families.release_0_5_11 import inserted
from sglang_eagle_sizing.families.release_0_5_11.concerns import SPECULATORS_FORMAT
from sglang_eagle_sizing.families.release_0_5_11.sites import GET_CONFIG_FILES, SITES, Kind
from sglang_eagle_sizing.syntax import code_of, dotted, statements, statements_with_comments

FUNCTION = "get_config"
HELPER = "is_speculators_eagle3_config"
LABEL = "speculators-config"
DRAFTER_FILE = next(s.file for s in SITES if s.kind is Kind.DRAFTER_FC)
LOAD_WEIGHTS = "LlamaForCausalLMEagle3.load_weights"


def _calls(node: cst.CSTNode, name: str) -> list[cst.Call]:
    found = []

    class Visitor(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if dotted(call.func) == name:
                found.append(call)

    node.visit(Visitor())
    return found


def _config_read(try_: cst.Try) -> str | None:
    """What a ``try`` whose body is ``config = <call>(...)`` calls, else None."""
    body = try_.body.body
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine):
        return None
    if len(body[0].body) != 1 or not isinstance(assign := body[0].body[0], cst.Assign):
        return None
    if (
        len(assign.targets) == 1
        and dotted(assign.targets[0].target) == "config"
        and isinstance(assign.value, cst.Call)
    ):
        return dotted(assign.value.func)
    return None


def _tries(node: cst.CSTNode) -> list[cst.Try]:
    found = []

    class Visitor(cst.CSTVisitor):
        def visit_Try(self, try_: cst.Try) -> None:
            found.append(try_)

    node.visit(Visitor())
    return found


class SpeculatorsConfigRule(Rule):
    concerns = (SPECULATORS_FORMAT,)
    files = frozenset(GET_CONFIG_FILES)
    needles = (f"def {FUNCTION}(",)

    def __init__(self, file: str):
        super().__init__(file)
        self._found = False
        self._site: cst.Try | None = None

    def visit_FunctionDef(self, node):
        top = not self._scope
        super().visit_FunctionDef(node)
        if not top or node.name.value != FUNCTION:
            return True
        self._found = True
        reads = _calls(node, inserted.AUTO_CONFIG_CALL)
        tries = _tries(node)
        sites = [t for t in tries if _config_read(t) == inserted.AUTO_CONFIG_CALL]
        routed = [t for t in tries if _config_read(t) == inserted.SPECULATORS_CONFIG_READ]
        if routed and not reads:
            self.report(routed[0], LABEL, Finding.ROUTED, FUNCTION)
        elif not reads:
            raise self.fail(node, f"{FUNCTION}: no {inserted.AUTO_CONFIG_CALL}")
        elif len(reads) == 1 and len(sites) == 1 and not routed:
            self._site = sites[0]
            self.report(sites[0], LABEL, Finding.UNROUTED, FUNCTION)
        else:
            # not one try whose body is only config = AutoConfig.from_pretrained(...)
            for call in reads:
                self.report(call, LABEL, Finding.UNKNOWN, FUNCTION)
        return True

    def leave_Try(self, original_node, updated_node):
        if original_node is not self._site:
            return updated_node
        line = updated_node.body.body[0]
        assign = line.body[0]
        call = assign.value.with_changes(func=cst.Name(inserted.SPECULATORS_CONFIG_READ))
        line = line.with_changes(body=[assign.with_changes(value=call)])
        return updated_node.with_changes(body=updated_node.body.with_changes(body=[line]))

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
