"""The library is the oracle on SGLang 0.5.23: for every norm variant of the speculators
EAGLE-3 format and for 3 and 4 aux layers, the patched 0.5.23's drafter forward equals the
``speculators`` library's own ``Eagle3DraftModel`` forward on the checkpoint the library saved
(float32, CPU).

0.5.23 runs only in ``.venv-0.5.23``, which has no ``speculators``: first
test/support/speculators_reference.py in ``.venv`` (this interpreter) builds each drafter with
the library, saves it with its ``save_pretrained`` and writes the inputs and the library's
outputs beside it; then test/support/speculators_oracle_probe_0_5_23.py in ``.venv-0.5.23``,
once in the patched tree (every case and every mutant) and once in 0.5.23 as released
(``--prototype``: the config the converter would give, written by the probe), side by side.
SGLang reads each checkpoint through ``get_config`` and ``LlamaForCausalLMEagle3.load_weights``
(names as saved) and runs its real forward (``RadixAttention`` on ``TorchNativeAttnBackend``,
real KV pools) on one sequence of 6 tokens, as ``DRAFT_EXTEND_V2`` (every token's logits) and
as ``EXTEND`` (the last token's). Compared: the logits, and the hidden states the next draft
step reads (the library's: what its decoder layer reads on its second TTT step).

The mutants (each one change to the patched source, made in the probe's process) show the
comparison has teeth: each is caught by the cases of the variant it breaks, and only by them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, SUPPORT
from conftest import run_cli as run
from sglang_eagle_sizing.wheel import cached_release_wheel
from speculators_checks import (
    ATOL,
    CASES,
    CAUGHT,
    assert_caught_by_its_variants_only,
    assert_equals_library,
    side_by_side,
)

PYTHON_0_5_23 = REPO / ".venv-0.5.23" / "bin" / "python"

#: mutant (the probe's MUTANTS: one change to the patched source) -> the variants whose
#: cases must catch it; every other case must still pass
MUTANTS = {
    "ignore-norm-before-residual": ("norm_before_residual",),
    "drop-input-norm": ("norm_before_fc",),
    "drop-fc-norm": ("fc_norm",),
    "fc-norms-reversed": ("fc_norm",),
    "ignore-norm-output": ("norm_output",),
    "config-drops-norm-before-residual": ("norm_before_residual",),
}

#: the variants 0.5.23 as released computes as the library does (its LlamaModel reads them)
RELEASED_READS = ("default", "norm_before_fc", "fc_norm", "norm_output")


def _run(python: Path, args: list[str], root: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if root is not None:
        env["PYTHONPATH"] = str(root)
    return subprocess.run(
        [str(python), *args], env=env, capture_output=True, text=True, timeout=600,
        cwd=root or REPO,
    )


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """The library's references (``.venv``), then the probe in the patched 0.5.23 tree
    (every case, every mutant) and in 0.5.23 as released, side by side (``.venv-0.5.23``)."""
    assert PYTHON_0_5_23.exists(), "no .venv-0.5.23: run scripts/setup.sh"
    work = tmp_path_factory.mktemp("speculators-oracle-0.5.23")
    released, patched = work / "released", work / "patched"
    with zipfile.ZipFile(cached_release_wheel("0.5.23")) as wheel:
        wheel.extractall(released, [n for n in wheel.namelist() if n.startswith("sglang/")])
    shutil.copytree(released / "sglang", patched / "sglang")
    assert run("apply", "--quiet", str(patched / "sglang"))[0] == 0

    references = work / "references"
    result = _run(Path(sys.executable), [str(SUPPORT / "speculators_reference.py"), str(references)])
    assert "REFERENCE-JSON " in result.stdout, result.stderr[-3000:]

    probe = str(SUPPORT / "speculators_oracle_probe_0_5_23.py")
    patched_args = [probe, str(references)]
    for mutant in MUTANTS:
        patched_args += ["--mutant", mutant]
    runs = {
        "patched": (patched, patched_args),
        "released": (released, [probe, str(references), "--prototype"]),
    }
    return side_by_side(runs, lambda root, args: _run(PYTHON_0_5_23, args, root))


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


def test_released_0_5_23_misses_norm_before_residual_and_4_aux_layers(probes):
    """The harness discriminates without the patch: 0.5.23 as released, given the config
    the converter would give, equals the library on the variants its LlamaModel reads with
    3 aux layers, differs on norm_before_residual, and cannot load 4 aux layers into its fc
    (its fc counts eagle_config's ids only)."""
    cases = probes["released"]["cases"]
    assert list(cases) == CASES
    for case, got in cases.items():
        if case.endswith("/4"):
            assert "Attempted to load weight" in got.get("error", ""), (case, got)
        elif got["variant"] in RELEASED_READS:
            assert max(got["logits"], got["carried"]) <= ATOL, (case, got)
        else:
            assert max(got["logits"], got["carried"]) > CAUGHT, (case, got)
