"""``top-level-layer-ids``: the target's capture reads the drafter's layer ids through the
parser, top-level ids (hidden-state indices) included, and hands the target class the layer
ids for which its contract captures them (``get_eagle3_target_layer_ids``).
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import PARSE, TARGET_LAYER_IDS
from sglang_eagle_sizing.families.release_0_5_23.rules.base import parsed_into
from sglang_eagle_sizing.families.release_0_5_23.sites import TARGET_CAPTURE
from sglang_eagle_sizing.shared import CaptureTryRule


class TargetCaptureRule(CaptureTryRule):
    """The target captures what the parser reads: 0.5.11's rule (``rules/target_capture.py``)
    on 0.5.23's place, with the parser's three lines for the ``= True`` default and the
    ``try: eagle_config.get(...) ... except Exception:`` after it."""

    concerns = (concerns.TOP_LEVEL_LAYER_IDS,)
    files = frozenset({TARGET_CAPTURE[0]})
    needles = ("eagle_aux_hidden_state_layer_ids",)
    place = TARGET_CAPTURE

    def routed(self, stmt: cst.CSTNode) -> bool:
        return parsed_into(stmt) is not None

    def replacement(self, owner: str, hf_config: str) -> str:
        return (
            f"eagle3_draft_config = {PARSE}(\n"
            f"    draft_hf_config={hf_config}\n"
            ")\n"
            f"{owner}.eagle_use_aux_hidden_state = eagle3_draft_config.use_aux_hidden_state\n"
            f"{owner}.eagle_aux_hidden_state_layer_ids = {TARGET_LAYER_IDS}(\n"
            f"    eagle3_draft_config, {TARGET_MODEL_CONFIG}\n"
            ")\n"
        )

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool | None:
        super().visit_FunctionDef(node)
        if self.scope == self.place[1]:
            names = {p.name.value for p in (*node.params.params, *node.params.kwonly_params)}
            if TARGET_MODEL_CONFIG not in names:
                raise self.fail(node, f"{self.scope}: no {TARGET_MODEL_CONFIG} parameter")
        return True


#: the target's ``ModelConfig``, a parameter of ``_resolve_eagle_aux_hidden_state``
TARGET_MODEL_CONFIG = "model_config"
