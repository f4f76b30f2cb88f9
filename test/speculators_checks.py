"""What both speculators oracle tests (``test_speculators_oracle.py`` for 0.5.11,
``test_speculators_oracle_0_5_23.py``) hold each probe result to."""

from concurrent.futures import ThreadPoolExecutor

#: float32 on the CPU: the two forwards differ by rounding only (~1e-6 observed, on 0.5.23 too,
#: where the library runs on torch 2.11 and SGLang on 2.14)
ATOL = 1e-5
#: a mutant is caught when a difference is this large, or loading / the forward fails
CAUGHT = 1e-3
TOKENS = 6
HIDDEN = 64

VARIANTS = ["default", "norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"]
CASES = [f"{variant}/{aux}" for variant in VARIANTS for aux in (3, 4)] + [
    "default/3 Eagle3Speculator",  # the early architecture name in config.json
    "default/3 no aux ids",  # eagle_aux_hidden_state_layer_ids null: 3 to both
]


def side_by_side(runs: dict, run_probe) -> dict:
    """``{tree: (root, probe arguments)}`` run two at a time by ``run_probe(root, args)``:
    ``{tree: the probe's JSON}``, each from its own tree's SGLang."""
    from conftest import probe_json

    with ThreadPoolExecutor(2) as pool:
        futures = {tree: pool.submit(run_probe, root, args) for tree, (root, args) in runs.items()}
        found = {tree: probe_json(future.result()) for tree, future in futures.items()}
    for tree, (root, _) in runs.items():
        assert found[tree]["sglang_file"].startswith(str(root))
    return found


def assert_equals_library(got: dict, case: str, hidden=HIDDEN, tokens=TOKENS, atol=ATOL) -> None:
    """One case of the patched tree against the library's forward."""
    assert "error" not in got, got["error"]
    aux = int(case.split("/")[1][0])
    assert got["fc_in_features"] == aux * hidden
    # The forward went through the attention backend: it wrote every token's K to the pool,
    # once per mode.
    assert got["kv_rows_written"] == [tokens, tokens]
    # load_weights wrote every parameter (each starts as NaN).
    assert got["unloaded"] == []
    # The draft vocabulary maps to the target ids the library's t2d marks.
    assert got["hot_token_ids_match"]
    assert got["logits"] <= atol, got
    assert got["carried"] <= atol, got


def caught(got: dict, threshold: float = CAUGHT) -> bool:
    """A mutant's run is caught: it failed, left a weight unloaded, or differs by more than
    ``threshold``."""
    if "error" in got or got["unloaded"]:
        return True
    return max(got["logits"], got["carried"]) > threshold


def assert_caught_by_its_variants_only(cases: dict, mutant: str, variants) -> None:
    """``mutant`` is caught by the cases of ``variants`` (None: every case) and passes the
    others."""
    for case, result in cases.items():
        got = result["mutants"][mutant]
        expected = variants is None or result["variant"] in variants
        assert caught(got) == expected, (case, got)
        if not expected:
            assert max(got["logits"], got["carried"]) <= ATOL, (case, got)
