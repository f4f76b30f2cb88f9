"""What both speculators oracle tests (``test_speculators_oracle.py`` for 0.5.11,
``test_speculators_oracle_0_5_23.py``) hold each probe result to."""


def assert_equals_library(got: dict, case: str, hidden: int, tokens: int, atol: float) -> None:
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


def caught(got: dict, threshold: float) -> bool:
    """A mutant's run is caught: it failed, left a weight unloaded, or differs by more than
    ``threshold``."""
    if "error" in got or got["unloaded"]:
        return True
    return max(got["logits"], got["carried"]) > threshold
