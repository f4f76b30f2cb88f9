"""The target ``ModelRunner`` reads the drafter's ``eagle_config`` through the workers' parser.

0.5.11 parses it a third way in ``ModelRunner.__init__`` (``try: eagle_config.get(...)``,
``except:`` anything): that decides which layers the target captures, i.e. the width the
draft side must size for. The rule replaces the ``try`` (and the ``= True`` default before it)
with ``parse_eagle_use_aux_hidden_state`` (``spec_info``'s, imported at the top of the module
with ``SpeculativeAlgorithm``) and ``get_eagle_captured_layer_ids``, imported where it is
used, as the module already does for DFLASH (``eagle_info`` imports ``model_runner``, so a
module-level import would be circular).
"""

from __future__ import annotations

import libcst as cst

from .. import concerns
from ..engine import Finding, RewriteError, Rule
from ..sites import TARGET_CAPTURE
from ..syntax import code_of, dotted, statements
from .aux_flag import FLAG, PARSER_CALL, _contains, _eagle_config_source, assigned

LAYER_IDS_KEY = "eagle_aux_hidden_state_layer_ids"


def layer_ids_owner(stmt: cst.CSTNode) -> str | None:
    """``owner`` when ``stmt`` assigns ``owner.eagle_aux_hidden_state_layer_ids`` (in a ``try``
    too): ``self`` in 0.5.11's ``ModelRunner``, ``config`` in 0.5.23's capture resolution."""
    owner = None

    def predicate(node: cst.CSTNode) -> bool:
        nonlocal owner
        if isinstance(node, cst.Assign):
            for target in node.targets:
                name = dotted(target.target) or ""
                if name.endswith("." + LAYER_IDS_KEY):
                    owner = name.rsplit(".", 1)[0]
                    return True
        return False

    _contains(stmt, predicate)
    return owner


def _is_parser_assignment(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Assign)
        and any(dotted(t.target) == FLAG for t in node.targets)
        and isinstance(node.value, cst.Call)
        and dotted(node.value.func) == PARSER_CALL
    )


class CaptureTryRule(Rule):
    """The target's own reading of the drafter's ``eagle_config`` (``owner.eagle_use_aux_hidden_state
    = True``, then a ``try`` that assigns ``owner.eagle_aux_hidden_state_layer_ids`` and swallows
    any failure) replaced by ``replacement``, in the function ``place`` names. Both release
    families have it; each says where and with what."""

    #: (file, ``Class.method``) of the reading
    place: tuple[str, str] = ("", "")

    def __init__(self, file: str):
        super().__init__(file)
        self.found = False
        self.seen = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        super().visit_FunctionDef(node)
        self.seen = self.seen or self.scope == self.place[1]
        return True

    def finish(self, module: cst.Module) -> None:
        if not self.seen:
            raise RewriteError(self.file, 1, f"{self.place[1]}: not found (the target's capture)")

    def routed(self, stmt: cst.CSTNode) -> bool:
        """Whether ``stmt`` is what ``replacement`` writes first."""
        raise NotImplementedError

    def replacement(self, owner: str, hf_config: str) -> str:
        raise NotImplementedError

    def leave_IndentedBlock(self, original_node, updated_node):
        if self.scope != self.place[1]:
            return updated_node
        body = list(updated_node.body)
        for index, stmt in enumerate(body):
            if self.routed(stmt):
                self.found = True
                self.report(original_node.body[index], "target-capture", Finding.ROUTED)
                return updated_node
            owner = layer_ids_owner(stmt) if isinstance(stmt, cst.Try) else None
            if owner is None:
                continue
            self.found = True
            self.report(original_node.body[index], "target-capture", Finding.UNROUTED)
            source = _eagle_config_source(stmt)
            if source is None:
                raise self.fail(original_node.body[index], "eagle_config read in a form the rule does not know")
            flag = f"{owner}.eagle_use_aux_hidden_state"
            start = index - 1 if index > 0 and assigned(body[index - 1]) == flag else index
            new = statements(
                self.replacement(owner, code_of(source)), self.column_of(original_node.body[index])
            )
            new[0] = new[0].with_changes(leading_lines=body[start].leading_lines)
            body[start : index + 1] = new
            return updated_node.with_changes(body=body)
        return updated_node

    def leave_FunctionDef(self, original_node, updated_node):
        scope = self.scope
        updated_node = super().leave_FunctionDef(original_node, updated_node)
        if scope == self.place[1] and not self.found:
            raise self.fail(original_node, f"{scope}: the target's eagle_config parsing was not found")
        return updated_node


class TargetCaptureRule(CaptureTryRule):
    concerns = (concerns.TARGET_CAPTURE,)
    files = frozenset({TARGET_CAPTURE[0]})
    needles = ("eagle_config",)
    place = TARGET_CAPTURE

    def routed(self, stmt: cst.CSTNode) -> bool:
        return _contains_direct(stmt, _is_parser_assignment)

    def replacement(self, owner: str, hf_config: str) -> str:
        return (
            "from sglang.srt.speculative.eagle_info import get_eagle_captured_layer_ids\n\n"
            "# The drafter's eagle_config, read by the parser every EAGLE worker uses:\n"
            "# what the target captures and the draft side sizes for cannot drift apart.\n"
            f"{FLAG} = {PARSER_CALL}(self.spec_algorithm, {hf_config})\n"
            f"{owner}.{LAYER_IDS_KEY} = get_eagle_captured_layer_ids(\n"
            f"    {hf_config}, self.model_config\n"
            ")\n"
        )


def _contains_direct(stmt: cst.CSTNode, predicate) -> bool:
    """``predicate`` holds for a small statement of this line (not in nested blocks)."""
    return isinstance(stmt, cst.SimpleStatementLine) and any(predicate(s) for s in stmt.body)
