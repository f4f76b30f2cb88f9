"""SGLang 0.5.23's series: one patch per concern (``concerns.ORDER``), each
described for upstream's reviewers in ``descriptions/<concern>.md`` (its subject on the
first line, then the sections of SGLang's pull-request template)."""

from __future__ import annotations

from pathlib import Path

from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.series import Patch, read_patch

DESCRIPTIONS = Path(__file__).with_name("descriptions")

#: The earlier patches a patch needs to be applied on the release (its description says so,
#: on a line of its own beginning with "Needs"); every other patch applies alone.
CONTRACTS = (
    concerns.CAPTURE_CONTRACT,
    concerns.CAPTURE_CONTRACT_HANDED_ON,
    concerns.CAPTURE_CONTRACT_OWN_RULES,
)
NEEDS: dict[str, tuple[str, ...]] = {
    concerns.DRAFT_CHECK: (concerns.AUX_COUNT, *CONTRACTS),
    concerns.TOP_LEVEL_LAYER_IDS: (concerns.AUX_COUNT, *CONTRACTS, concerns.DRAFT_CHECK),
    concerns.SPECULATORS_EAGLE3: (
        concerns.AUX_COUNT,
        *CONTRACTS,
        concerns.DRAFT_CHECK,
        concerns.TOP_LEVEL_LAYER_IDS,
    ),
}


def patches(gpu_test: bool = False) -> tuple[Patch, ...]:
    """Every concern (0.5.23's series has no GPU test: ``gpu_test`` changes nothing)."""
    return tuple(read_patch(DESCRIPTIONS, c) for c in concerns.ORDER)

