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
from sglang_eagle_sizing.families.release_0_5_11 import concerns
from sglang_eagle_sizing.families.release_0_5_11.rules.aux_flag import FLAG, PARSER_CALL
from sglang_eagle_sizing.families.release_0_5_11.sites import TARGET_CAPTURE
from sglang_eagle_sizing.shared import LAYER_IDS_KEY, CaptureTryRule
from sglang_eagle_sizing.syntax import dotted


def _is_parser_assignment(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Assign)
        and any(dotted(t.target) == FLAG for t in node.targets)
        and isinstance(node.value, cst.Call)
        and dotted(node.value.func) == PARSER_CALL
    )


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
