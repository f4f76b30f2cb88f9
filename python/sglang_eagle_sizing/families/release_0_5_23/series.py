"""SGLang 0.5.23's series: one patch per concern (``concerns.ORDER``), each
described for upstream's reviewers in ``descriptions/<concern>.md`` (its subject on the
first line, then the sections of SGLang's pull-request template), grouped into the pull
requests a maintainer merges (``PULL_REQUESTS``), each with its cover letter's sections in
``pull_requests/<name>.md``."""

from __future__ import annotations

from pathlib import Path

from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.series import Patch, PullRequest, read_patch

DESCRIPTIONS = Path(__file__).with_name("descriptions")

#: The earlier patches a patch needs to be applied on the release (its description says so,
#: on a line of its own beginning with "Needs"); every other patch applies alone.
CONTRACTS = (
    concerns.CAPTURE_CONTRACT,
    concerns.CAPTURE_CONTRACT_HANDED_ON,
    concerns.CAPTURE_CONTRACT_OWN_RULES,
)
NEEDS: dict[str, tuple[str, ...]] = {
    concerns.CAPTURE_CONTRACT_OWN_RULES: (concerns.CAPTURE_CONTRACT,),
    concerns.DRAFT_CHECK: (concerns.AUX_COUNT, *CONTRACTS),
    concerns.TOP_LEVEL_LAYER_IDS: (concerns.AUX_COUNT, *CONTRACTS, concerns.DRAFT_CHECK),
    concerns.SPECULATORS_EAGLE3: (
        concerns.AUX_COUNT,
        *CONTRACTS,
        concerns.DRAFT_CHECK,
        concerns.TOP_LEVEL_LAYER_IDS,
    ),
}

#: The pull requests, in the order they apply (their concerns, joined, are ``concerns.ORDER``):
#: each applies on the release after the ones it ``needs`` (which hold every patch its
#: patches need, ``NEEDS``), and all of them in order give the tree ``apply`` writes.
DRAFTER_CONFIG = "eagle3-drafter-config"
PULL_REQUESTS: tuple[PullRequest, ...] = (
    PullRequest(
        DRAFTER_CONFIG,
        "[Spec] One reading of the EAGLE-3 drafter config, checked before load",
        (
            concerns.AUX_COUNT,
            *CONTRACTS,
            concerns.DRAFT_CHECK,
            concerns.TOP_LEVEL_LAYER_IDS,
        ),
    ),
    PullRequest(
        "speculators-format",
        "[Spec] Load EAGLE-3 drafters saved in the speculators format",
        (concerns.SPECULATORS_NORMS, concerns.SPECULATORS_EAGLE3),
        needs=(DRAFTER_CONFIG,),
    ),
    PullRequest(
        "draft-dtype",
        "[Spec] Build the EAGLE draft in its target's dtype at --dtype auto",
        (concerns.DRAFT_DTYPE,),
    ),
    PullRequest(
        "gemma3-capture",
        "[Spec] Capture Gemma-3's layer outputs, residual included, for EAGLE-3",
        (concerns.GEMMA3_AUX_RESIDUAL,),
    ),
    PullRequest(
        "standalone-pd",
        "[Spec] Hand STANDALONE's draft proposal from PD prefill to decode",
        (concerns.STANDALONE_DISAGG,),
    ),
    PullRequest(
        "idle-verify-input",
        "[Spec] Give the idle EAGLE verify input its KV layout fields",
        (concerns.IDLE_VERIFY_KV,),
    ),
)


def patches(gpu_test: bool = False) -> tuple[Patch, ...]:
    """Every concern (0.5.23's series has no GPU test: ``gpu_test`` changes nothing)."""
    return tuple(read_patch(DESCRIPTIONS, c) for c in concerns.ORDER)

