"""The library is the oracle: for every norm variant of the speculators EAGLE-3 format and for
3 and 4 aux layers, the patched SGLang's drafter forward equals the ``speculators`` library's
own ``Eagle3DraftModel`` forward on the same weights and inputs (float32, CPU).

One run of test/support/speculators_oracle_probe.py in the patched tree (one process: the
imports cost ~10 s, the eleven cases ~1 s, each mutant ~1 s). Each checkpoint is built by
the library and written by its own ``save_pretrained``; SGLang reads it through the patched
``get_config`` and ``LlamaForCausalLMEagle3.load_weights`` (names as saved) and runs its real
forward (``RadixAttention`` on ``TorchNativeAttnBackend``, real KV pools) on one sequence of 6
tokens, as ``DRAFT_EXTEND_V2`` (every token's logits) and as ``EXTEND`` (the last token's).
Compared: the logits, and the hidden states the next draft step reads (the library's: what
its decoder layer reads on its second TTT step). See docs/speculators-oracle.md.

The mutants (each one change to the patched source, made in the probe's process) show the
comparison has teeth: each is caught by the cases of the variant it breaks, and only by them.
"""

from __future__ import annotations

import pytest

from conftest import SUPPORT, probe_json, run_python

#: float32 on the CPU: the two forwards differ by rounding only (~1e-6 observed)
ATOL = 1e-5
#: a mutant is caught when a difference is this large, or loading / the forward fails
CAUGHT = 1e-3
TOKENS = 6
HIDDEN = 64

VARIANTS = ["default", "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"]
CASES = [f"{variant}/{aux}" for variant in VARIANTS for aux in (3, 4)] + [
    "default/3 Eagle3Speculator",  # the early architecture name in config.json
]

#: mutant (see the probe's MUTANTS) -> the variant whose cases must catch it
MUTANTS = {}


@pytest.fixture(scope="module")
def oracle(patched_root, libcuda_stub, tmp_path_factory):
    work = tmp_path_factory.mktemp("speculators-oracle")
    args = [str(SUPPORT / "speculators_oracle_probe.py"), str(work)]
    for mutant in MUTANTS:
        args += ["--mutant", mutant]
    probe = probe_json(run_python(patched_root, libcuda_stub, args))
    assert probe["sglang_file"].startswith(str(patched_root))
    return probe


def test_every_case_ran(oracle):
    assert list(oracle["cases"]) == CASES


@pytest.mark.parametrize("case", CASES)
def test_drafter_forward_equals_the_library(oracle, case):
    got = oracle["cases"][case]
    assert "error" not in got, got["error"]
    aux = int(case.split("/")[1][0])
    assert got["fc_in_features"] == aux * HIDDEN
    # The forward went through the attention backend: it wrote every token's K to the pool,
    # once per mode.
    assert got["kv_rows_written"] == [TOKENS, TOKENS]
    assert got["logits"] <= ATOL, got
    assert got["carried"] <= ATOL, got


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_a_mutant_is_caught_by_its_variant_only(oracle, mutant):
    variant = MUTANTS[mutant]
    for case in CASES:
        got = oracle["cases"][case]["mutants"][mutant]
        caught = "error" in got or max(got["logits"], got["carried"]) > CAUGHT
        assert caught == case.startswith(variant + "/"), (case, got)
