"""``top-level-layer-ids``: the target's capture reads the drafter's layer ids through the
parser, top-level ids included.
"""

from __future__ import annotations

import libcst as cst

from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import INDICES_FIELD, PARSE
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
            f"{owner}.eagle_aux_hidden_state_layer_ids = (\n"
            "    eagle3_draft_config.aux_hidden_state_layer_ids\n"
            ")\n"
            + (
                f"{owner}.{INDICES_FIELD} = (\n"
                "    eagle3_draft_config.aux_hidden_state_indices\n"
                ")\n"
                if enabled(concerns.SPECULATORS_EAGLE3)
                else ""
            )
        )
