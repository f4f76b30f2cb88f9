"""``draft-check``: the EAGLE-3 drafter is checked against its target where the server
arguments decide for the drafter, before any process loads weights
(``_handle_eagle3_draft_check``, calling ``validate_eagle3_draft_config``): its keys, and what
the target class's contract (``capture-contract``) captures for its layer ids.
"""

from __future__ import annotations

from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    DRAFT_CHECK_FUNCTION,
    DRAFT_CHECK_HOOK,
)
from sglang_eagle_sizing.families.release_0_5_23.rules.draft_dtype import DrafterHookRule
from sglang_eagle_sizing.families.release_0_5_23.sites import DRAFT_CHECK_ANCHOR


class DraftCheckRule(DrafterHookRule):
    """The drafter is checked first thing in ``_handle_eagle_family``, after the algorithm's
    own check (``_check_oot_speculative_algorithm``): ``inserted.DRAFT_CHECK_FUNCTION``."""

    concerns = (concerns.DRAFT_CHECK,)
    anchor = DRAFT_CHECK_ANCHOR
    needles = (DRAFT_CHECK_ANCHOR,)
    hook = DRAFT_CHECK_HOOK
    function = DRAFT_CHECK_FUNCTION
    label = "draft-check"
