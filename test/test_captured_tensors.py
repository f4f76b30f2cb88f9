"""The captured-tensor probe (scripts/captured_tensors_table.py) on a sample of classes: each
class runs through SGLang's own code on the CPU and each captured chunk is matched with
transformers' hidden states of the same weights. The sample's rows equal the committed table's
(a stale table or a changed capture fails), Llama's chunks are the hidden states their indices
name, and 0.5.23's released Gemma-3 hands on each layer's MLP branch without the residual
(upstream PR #39286), not a hidden state, where the patched one hands on each layer's output."""

from __future__ import annotations

import importlib.util
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TABLE = REPO / "docs/development/captured-tensors.md"
#: family -> ((file, class), ...), trees
SAMPLE = {
    "0.5.23": (
        (("llama", "LlamaForCausalLM"), ("gemma3_causal", "Gemma3ForCausalLM")),
        ("released", "patched"),
    ),
    "0.5.11": ((("llama", "LlamaForCausalLM"),), ("released",)),
}


def _script():
    spec = importlib.util.spec_from_file_location(
        "captured_tensors_table", REPO / "scripts/captured_tensors_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def probed():
    script = _script()
    for family in SAMPLE:
        python = script.ENVIRONMENTS[family] / "bin/python"
        if not python.exists():
            pytest.fail(f"{python}: missing; bash scripts/setup.sh makes it")
    # the two families at once (one process each per tree; two cores)
    with ThreadPoolExecutor(2) as pool:
        runs = {
            family: pool.submit(
                script.probe_family,
                family,
                [list(p) for p in pairs],
                script.NUM_LAYERS,
                trees,
            )
            for family, (pairs, trees) in SAMPLE.items()
        }
        results = {family: run.result() for family, run in runs.items()}
    return script, results


def _row(results, family, tree, name):
    return next(r for r in results[family][tree]["rows"] if r["class"] == name)


def test_llama_chunks_are_the_hidden_states_their_indices_name(probed):
    _, results = probed
    for family in SAMPLE:
        row = _row(results, family, "released", "LlamaForCausalLM")
        assert row["status"] == "ran", row
        # SGLang ids 0..3 (+ 1 each): hidden states 1..3 (index 4 = L is never reached)
        assert [c["index"] for c in row["chunks"]] == [1, 2, 3]
        assert {c["is"] for c in row["chunks"]} == {"k"}, row["chunks"]


def test_gemma3_released_hands_on_the_mlp_branch_not_the_hidden_state(probed):
    script, results = probed
    row = _row(results, "0.5.23", "released", "Gemma3ForCausalLM")
    assert row["status"] == "ran", row
    assert [c["is"] for c in row["chunks"]] == ["none"] * 4
    # chunk i is layer i-1's MLP branch after its post_feedforward_layernorm, to float32 noise
    assert [c["nearest"] for c in row["chunks"]] == [
        f"mlp-branch-{i}" for i in range(4)
    ]
    assert all(c["err"] < 1e-4 for c in row["chunks"]), row["chunks"]
    assert script.verdict(row) != "k"


def test_gemma3_patched_hands_on_each_layers_output(probed):
    # gemma3-aux-residual: hidden states 1..3, then the last layer's output before the norm
    _, results = probed
    row = _row(results, "0.5.23", "patched", "Gemma3ForCausalLM")
    assert row["status"] == "ran", row
    assert [c["index"] for c in row["chunks"]] == [1, 2, 3, 4]
    assert [c["is"] for c in row["chunks"]] == ["k", "k", "k", "L-pre"], row["chunks"]


def test_the_packaged_audit_is_what_the_sample_gives(probed):
    """report reads the audit from data/captured_tensors.json: the sample's classes there are
    what the probe gives now (a stale file, or a capture changed since, fails)."""
    import json

    script, results = probed
    packaged = json.loads((REPO / "python/sglang_eagle_sizing/data/captured_tensors.json").read_text())
    for family, (pairs, trees) in SAMPLE.items():
        fresh = {
            "released": results[family]["released"],
            "patched": results[family].get("patched", results[family]["released"]),
        }
        release = fresh["released"]["version"]
        audited = script.audit_data({family: fresh}, script.NUM_LAYERS)["releases"][release]
        for file, name in pairs:
            [entry] = [e for e in packaged["releases"][release][name] if e["file"] == file]
            [now] = [e for e in audited[name] if e["file"] == file]
            for tree in trees:
                assert entry[tree] == now[tree], f"{release} {name} {tree}: regenerate the audit"


def _without_noise(cell: str) -> str:
    return re.sub(r" \(max err < 1e-0\d\)", "", cell)


def test_the_sample_rows_equal_the_committed_table(probed):
    script, results = probed
    committed = script.table_rows(TABLE.read_text(encoding="utf-8"))
    for family, (pairs, trees) in SAMPLE.items():
        rendered = script.rows_of(
            family,
            {
                "released": results[family]["released"],
                # a tree the sample did not run takes the committed cell (compared: released)
                "patched": results[family].get("patched", results[family]["released"]),
            },
        )
        for file, name in pairs:
            key = (family, file, name)
            assert key in committed, f"{key}: not in {TABLE.name}; regenerate it"
            # a nearest tensor's error is float32 noise: its power of ten is not compared
            released, patched, verdict = map(_without_noise, rendered[key])
            table_released, table_patched, table_verdict = map(_without_noise, committed[key])
            assert (
                released == table_released
            ), f"{key}: released changed; regenerate the table"
            if "patched" in trees:
                assert (
                    patched == table_patched
                ), f"{key}: patched changed; regenerate the table"
                assert verdict == table_verdict, key
