"""The library is the oracle: for every norm variant of the speculators EAGLE-3 format and for
3 and 4 aux layers, the patched SGLang's drafter forward equals the ``speculators`` library's
own ``Eagle3DraftModel`` forward on the same weights and inputs (float32, CPU).

One run of test/support/speculators_oracle_probe.py in the patched tree (one process: the
imports cost ~10 s, the twelve cases and seven mutants together ~5 s), and one in 0.5.11 as
released, side by side. Each checkpoint is built by
the library and written by its own ``save_pretrained``; SGLang reads it through the patched
``get_config`` and ``LlamaForCausalLMEagle3.load_weights`` (names as saved) and runs its real
forward (``RadixAttention`` on ``TorchNativeAttnBackend``, real KV pools) on one sequence of 6
tokens, as ``DRAFT_EXTEND_V2`` (every token's logits) and as ``EXTEND`` (the last token's).
Compared: the logits, and the hidden states the next draft step reads (the library's: what
its decoder layer reads on its second TTT step). See docs/development/speculators-oracle.md.

The mutants (each one change to the patched source, made in the probe's process) show the
comparison has teeth: each is caught by the cases of the variant it breaks, and only by them.
"""

from __future__ import annotations

import pytest
from conftest import REPO, SUPPORT, run_python
from speculators_checks import (
    ATOL,
    CASES,
    CAUGHT,
    assert_caught_by_its_variants_only,
    assert_equals_library,
    side_by_side,
)

#: mutant (the probe's MUTANTS: one change to the patched source) -> the variants whose
#: cases must catch it (None: every case); every other case must still pass
MUTANTS = {
    "drop-input-norm": ("norm_before_fc",),
    "drop-fc-norm": ("fc_norm",),
    "fc-norms-reversed": ("fc_norm",),
    "ignore-norm-before-residual": ("norm_before_residual",),
    "ignore-norm-output": ("norm_output",),
    "config-drops-norm-output": ("norm_output",),
    "no-layers-0-rename": None,
}


@pytest.fixture(scope="module")
def probes(pristine_root, patched_root, libcuda_stub, tmp_path_factory):
    """The probe in the patched tree (every case, every mutant) and, side by side, in 0.5.11
    as released (``--prototype``: its config written by the probe, ``layers.0.*`` read as
    ``midlayer.*``)."""
    work = tmp_path_factory.mktemp("speculators-oracle")
    probe = str(SUPPORT / "speculators_oracle_probe.py")
    patched_args = [probe, str(work / "patched")]
    for mutant in MUTANTS:
        patched_args += ["--mutant", mutant]
    runs = {
        "patched": (patched_root, patched_args),
        "released": (pristine_root, [probe, str(work / "released"), "--prototype"]),
    }
    return side_by_side(runs, lambda root, args: run_python(root, libcuda_stub, args))


@pytest.fixture(scope="module")
def oracle(probes):
    return probes["patched"]


def test_every_case_ran(oracle):
    assert list(oracle["cases"]) == CASES


@pytest.mark.parametrize("case", CASES)
def test_drafter_forward_equals_the_library(oracle, case):
    assert_equals_library(oracle["cases"][case], case)


@pytest.mark.parametrize("mutant", list(MUTANTS))
def test_a_mutant_is_caught_by_its_variant_only(oracle, mutant):
    assert_caught_by_its_variants_only(oracle["cases"], mutant, MUTANTS[mutant])


def test_released_0_5_11_matches_the_default_variant_only(probes):
    """The harness discriminates without the patch: 0.5.11's drafter (its config written by
    the probe, the weights renamed) equals the library on the default variant with 3 aux
    layers, differs on every other variant, and cannot load 4 aux layers into its fc."""
    cases = probes["released"]["cases"]
    assert list(cases) == CASES
    for case, got in cases.items():
        if case.endswith("/4"):
            assert "Attempted to load weight" in got.get("error", ""), (case, got)
        elif case.startswith("default/"):
            assert max(got["logits"], got["carried"]) <= ATOL, (case, got)
        else:
            assert max(got["logits"], got["carried"]) > CAUGHT, (case, got)
    # norm_output changes only what is carried to the next step, not the logits.
    assert cases["norm_output/3"]["logits"] <= ATOL


def test_the_doc_tables_list_every_case_and_mutant():
    """docs/development/speculators-oracle.md's tables (pasted from
    scripts/speculators_oracle_table.py) cover what this file runs: every case equal on the patched tree, every mutant."""
    doc = (REPO / "docs" / "development" / "speculators-oracle.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    patched = rows[: len(CASES)]
    assert [row.split("`")[1] for row in patched] == CASES
    assert all(row.endswith("| equal |") for row in patched), patched
    mutants = [row.split("`")[1] for row in rows[len(CASES):len(CASES) + len(MUTANTS)]]
    assert mutants == list(MUTANTS)


def test_the_librarys_qwen3_layer_is_not_what_llama_eagle3_computes(monkeypatch):
    """Why ``speculators_eagle3_to_llama_config`` refuses ``transformer_layer_config.model_type``
    ``qwen3`` (and none, which the library reads as qwen3): the library's ``Eagle3DraftModel``
    with that layer has ``self_attn.q_norm`` and ``self_attn.k_norm``, and its forward differs
    from the same drafter's with a llama layer (what ``LlamaForCausalLMEagle3`` computes, by
    the oracle above) on every other weight the same, the two norms' weights 1 included."""
    monkeypatch.syspath_prepend(str(SUPPORT))
    import torch
    from speculators.models.eagle3 import Eagle3SpeculatorConfig
    from speculators_reference import library_drafter, library_forward
    from transformers.models.qwen3.configuration_qwen3 import Qwen3Config

    llama = library_drafter("default", [2, 5, 8])
    keys = llama.config.transformer_layer_config.to_diff_dict()
    layer = Qwen3Config(**{k: v for k, v in keys.items() if k != "model_type"})
    layer._attn_implementation = "eager"
    config = Eagle3SpeculatorConfig(
        **{**llama.config.model_dump(), "transformer_layer_config": layer}
    )
    assert Eagle3SpeculatorConfig(
        **{**config.model_dump(), "transformer_layer_config": {"hidden_size": 64}}
    ).transformer_layer_config.model_type == "qwen3"  # none named: a Qwen3 layer
    qwen3 = type(llama)(config).eval()
    extra = qwen3.load_state_dict(llama.state_dict(), strict=False).missing_keys
    assert sorted(extra) == ["layers.0.self_attn.k_norm.weight", "layers.0.self_attn.q_norm.weight"]
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, 256, (6,), generator=generator)
    aux = torch.randn((6, 3 * 64), generator=generator)
    with torch.no_grad():
        for name in extra:
            qwen3.get_parameter(name).fill_(1.0)
    llama_logits, _ = library_forward(llama, aux, input_ids)
    qwen3_logits, _ = library_forward(qwen3, aux, input_ids)
    assert (qwen3_logits - llama_logits).abs().max() > 1e-2
