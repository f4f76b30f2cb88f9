"""SGLang 0.5.9-0.5.11's series: one patch per concern (``concerns.ORDER``), each described
for upstream's reviewers in ``descriptions/<concern>.md`` (its subject on the first line, then
the sections of SGLang's pull-request template). Each patch carries its own slice of the
fork's CPU test (``fork_test_slices``); the last, the GPU end-to-end test, has never run."""

from __future__ import annotations

import functools
from pathlib import Path

from sglang_eagle_sizing.families.release_0_5_11 import concerns
from sglang_eagle_sizing.series import Patch, read_patch

DESCRIPTIONS = Path(__file__).with_name("descriptions")

#: every patch applies on the release after the ones before it
NEEDS: dict[str, tuple[str, ...]] = {}

@functools.cache
def _every_patch() -> tuple[Patch, ...]:
    """Each concern's patch, the GPU end-to-end test last; read when first asked for."""
    return tuple(read_patch(DESCRIPTIONS, c) for c in concerns.ORDER)


def patches(gpu_test: bool = False) -> tuple[Patch, ...]:
    """Every concern but the GPU end-to-end test (no GPU here); ``gpu_test`` adds it last."""
    return _every_patch() if gpu_test else _every_patch()[:-1]
