"""Idle ranks under DP attention: every idle input the workers build can initialise the real
Triton attention backend's metadata for a padded idle batch, and FlashInfer's decode path up to
its planner, on the CPU; 0.5.11's cannot.

Runs test/support/idle_attention_probe.py once in the pristine 0.5.11 tree and once in the
patched tree, side by side (each imports the worker modules: ~20 s of CPU). The probe builds
each idle input through the worker's own method, pads the idle rank's batch with SGLang's own
``prepare_mlp_sync_batch`` (the busy rank holds 1 or 3 requests; SGLang picks MAX_LEN padding,
so the idle rank runs a batch of 1 or 3 rows) and runs the real ``ModelRunner.forward_idle``,
which re-initialises ``TritonAttnBackend``'s metadata from the idle input, then FlashInfer's
``init_forward_metadata`` on the same batch. Stand-ins (process groups, pinned memory, the
model, FlashInfer's planner, worker objects) are listed in the probe's docstring. No CUDA
kernel or graph runs here; with CUDA graphs on, a padded idle batch replays a graph instead.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import DATA, SUPPORT, probe_json, run_python

PAIR = DATA / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3"

#: idle-input kind -> the class the patched tree builds
KINDS = {
    "decode v1": "EagleDraftInput",
    "decode v2": "EagleDraftInput",
    "decode multi-layer v2": "EagleDraftInput",
    "verify": "EagleVerifyInput",
    "extend v1": "EagleDraftExtendInput",
    "extend multi-layer v1": "EagleDraftExtendInput",
    # 0.5.11's v2 draft-extend input class; built inline by the worker, not create_idle_input
    "extend v2": "EagleDraftInput",
}
#: what 0.5.11's Triton backend raises, per kind, when a padded idle batch reaches it
PRISTINE_ERRORS = {
    "decode v1": "AttributeError: 'NoneType' object has no attribute 'shape'",
    "decode v2": "AttributeError: 'NoneType' object has no attribute 'shape'",
    "decode multi-layer v2": "AttributeError: 'NoneType' object has no attribute 'shape'",
    "verify": "AttributeError: 'EagleVerifyInput' object has no attribute 'kv_indptr'",
    "extend v1": "AttributeError: 'NoneType' object has no attribute 'shape'",
    "extend v2": "AttributeError: 'NoneType' object has no attribute 'shape'",
}
BUSY_REQUESTS = [1, 3]


@pytest.fixture(scope="module")
def probes(pristine_root, patched_root, libcuda_stub):
    args = [str(SUPPORT / "idle_attention_probe.py"), str(PAIR / "draft"), str(PAIR / "target")]
    with ThreadPoolExecutor(2) as pool:
        runs = {
            tree: pool.submit(run_python, root, libcuda_stub, args)
            for tree, root in (("pristine", pristine_root), ("patched", patched_root))
        }
        results = {tree: run.result() for tree, run in runs.items()}
    for tree, result in results.items():
        assert result.returncode == 0, (tree, result.stderr[-4000:])
    probes = {tree: probe_json(result) for tree, result in results.items()}
    assert probes["pristine"]["sglang_file"].startswith(str(pristine_root))
    assert probes["patched"]["sglang_file"].startswith(str(patched_root))
    assert probes["pristine"]["errors"] == probes["patched"]["errors"] == []
    return probes


@pytest.mark.parametrize("kind", KINDS)
def test_padded_idle_batch_initialises_triton_metadata(probes, kind):
    made = probes["patched"]["kinds"][kind]
    assert made["built"] == "ok"
    assert made["type"] == KINDS[kind]
    assert made["kv_indptr"] == [0]  # no rows
    assert [run["busy_requests"] for run in made["runs"]] == BUSY_REQUESTS
    for run in made["runs"]:
        # SGLang's own padding choice gives the idle rank as many rows as the busy rank.
        assert (run["padding"], run["padded_batch_size"]) == ("MAX_LEN", run["busy_requests"])
        assert run["outcome"] == "ok", run.get("error")
        assert run["metadata"] == {
            "kv_indptr": [0],
            "kv_indices": 0,
            "attn_logits_rows": 0,
            "num_kv_splits_rows": 0,
        }
        # forward_idle went on to the model with the padded tokens
        assert run["model_calls"] == [run["busy_requests"] * run["num_tokens_per_req"]]
        # FlashInfer's decode path plans zero rows, its CPU index pointer agreeing
        assert run["flashinfer"] == "ok"
        assert run["flashinfer_plans"] == [
            {"kv_indptr": [0], "kv_indices": 0, "last_page_len_rows": 0, "indptr_cpu": [0]}
        ]


@pytest.mark.parametrize("kind", PRISTINE_ERRORS)
def test_0_5_11_idle_input_fails_on_the_same_padded_batch(probes, kind):
    made = probes["pristine"]["kinds"][kind]
    assert made["built"] == "ok"
    assert made["kv_indptr"] is None
    for pristine_run, patched_run in zip(made["runs"], probes["patched"]["kinds"][kind]["runs"]):
        assert pristine_run["padded_batch_size"] == patched_run["padded_batch_size"]
        assert pristine_run["outcome"] == "error"
        assert pristine_run["error"] == PRISTINE_ERRORS[kind]
        assert pristine_run["where"] == "layers/attention/triton_backend.py"
        assert pristine_run["model_calls"] == []
        assert pristine_run["flashinfer"] == PRISTINE_ERRORS[kind]
        assert pristine_run["flashinfer_where"] == "layers/attention/flashinfer_backend.py"


def test_0_5_11_verify_idle_input_needs_cuda_and_multi_layer_v1_does_not_import(probes):
    pristine = probes["pristine"]
    # EagleVerifyInput.create_idle_input hard-codes device="cuda" (the probe then builds it
    # with its tensors on the CPU to reach the backend); the patched one takes the device.
    assert "NVIDIA driver" in pristine["verify_cuda_error"]
    assert "verify_cuda_error" not in probes["patched"]
    assert pristine["kinds"]["extend multi-layer v1"]["built"].startswith("ImportError")
