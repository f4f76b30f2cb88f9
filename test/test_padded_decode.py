"""Several requests under DP attention: a draft decode batch padded after its attention
metadata was built runs on the real Triton decode attention, on the CPU; 0.5.11's stops.

Runs test/support/padded_decode_probe.py in the pristine 0.5.11 tree and in the patched tree,
side by side: this rank's decode batch (1 request) initialises ``TritonAttnBackend``'s
metadata (patched: for the batch as DP attention will pad it, ``get_draft_decode_metadata_batch``),
SGLang's own ``prepare_mlp_sync_batch`` pads it to the other rank's 2 requests (MAX_LEN
padding), and the real ``forward_decode`` runs its Triton kernels (interpreted) on the padded
query. That is the order ``EAGLEWorker.draft`` runs them in without CUDA graphs; the served
cases ``eagle3-dp-attention-3-requests-v1`` and ``-v2`` of ``smoke`` (docs/smoke.md) are the end
to end check. No CUDA kernel or graph runs here.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import DATA, SUPPORT, probe_json, run_python

TARGET = DATA / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3" / "target"


@pytest.fixture(scope="module")
def probes(pristine_root, patched_root, libcuda_stub):
    args = [str(SUPPORT / "padded_decode_probe.py"), str(TARGET)]
    with ThreadPoolExecutor(2) as pool:
        runs = {
            tree: pool.submit(run_python, root, libcuda_stub, args)
            for tree, root in (("pristine", pristine_root), ("patched", patched_root))
        }
        results = {tree: run.result() for tree, run in runs.items()}
    probes = {tree: probe_json(result) for tree, result in results.items()}
    assert probes["pristine"]["sglang_file"].startswith(str(pristine_root))
    assert probes["patched"]["sglang_file"].startswith(str(patched_root))
    return probes


def test_the_batch_is_padded_after_its_metadata_was_built(probes):
    for probe in probes.values():
        assert probe["kv_indptr"] == [0, 5]  # one request of 5 tokens
        assert probe["batch_size_after_the_metadata"] == 1  # the batch itself untouched
        assert (probe["padding"], probe["padded_batch_size"]) == ("MAX_LEN", 2)


def test_the_patched_draft_builds_the_metadata_for_the_padded_batch(probes):
    patched = probes["patched"]
    assert patched["draft_metadata_helper"] is True
    assert patched["draft_kv_indptr"][:2] == [0, 5]
    assert len(patched["draft_kv_indptr"]) == patched["padded_batch_size"] + 1


def test_patched_decode_attends_every_row_and_the_real_one_as_unpadded(probes):
    patched = probes["patched"]
    assert patched["outcome"] == "ok", patched.get("error")
    assert patched["output_rows"] == 2
    # The real row is what the same query gives unpadded on the same KV.
    assert patched["real_row_max_difference"] == 0.0
    assert patched["finite"] is True


def test_pristine_decode_attention_stops_at_the_padded_rows(probes):
    pristine = probes["pristine"]
    assert pristine["draft_metadata_helper"] is False
    assert pristine["draft_kv_indptr"] == [0, 5]
    assert pristine["outcome"] == "error"
    assert pristine["error"].startswith("AssertionError")
    assert pristine["where"] == "layers/attention/triton_ops/decode_attention.py"
