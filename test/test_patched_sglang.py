"""The patched SGLang itself: it imports, and its classmethods give the contract's sizes.

Runs test/support/probe_patched.py in one subprocess (a worker import costs ~20 s) with the
patched tree first on the path. SGLang's worker modules import ``sgl_kernel``, whose extension
links ``libcuda.so.1``; this machine has no GPU driver, so the ``libcuda_stub`` fixture compiles
a stand-in whose functions all return CUDA_ERROR_NO_DEVICE. It only lets the imports happen.

Expected sizes are computed here from the config.json files alone, by the contract in
../shared/reference/sizing-contract.md, independently of SGLang's ``ModelConfig``.
"""

from __future__ import annotations

import json

import pytest

from conftest import DATA, SUPPORT, config_json, hidden_size_in, probe_json, run_python

# (case name, pair folder or (draft folder, target folder), algorithm)
CASES = [
    ("llama3.1-8b eagle3 (fp16 draft, bf16 target)", "llama3.1-8b-instruct__specforge-llama3-8b-eagle3", "EAGLE3"),
    ("llama3.1-8b eagle3 without aux", "llama3.1-8b-instruct__trtllm-2layer-noaux-fixture", "EAGLE3"),
    ("gemma-3-27b eagle3 (nested target width)", "gemma-3-27b-it__specforge-eagle3", "EAGLE3"),
    ("qwen3-30b-a3b eagle3 moe draft", "qwen3-30b-a3b__specforge-moe-draft-eagle3", "EAGLE3"),
    ("qwen3-4b eagle3", "qwen3-4b__specforge-eagle3", "EAGLE3"),
    ("llama-2-70b eagle", "llama-2-70b-chat__sglang-eagle1", "EAGLE"),
    # STANDALONE drafts with a smaller model of the same family, no EAGLE head.
    ("qwen3-4b standalone for qwen3-30b-a3b",
     ("qwen3-4b__specforge-eagle3/target", "qwen3-30b-a3b__specforge-moe-draft-eagle3/target"),
     "STANDALONE"),
]

TORCH_DTYPES = {"float16": "torch.float16", "bfloat16": "torch.bfloat16"}


def _folders(pair):
    if isinstance(pair, tuple):
        return DATA / pair[0], DATA / pair[1]
    return DATA / pair / "draft", DATA / pair / "target"


def _dtype(config):
    return TORCH_DTYPES[config.get("torch_dtype") or config.get("dtype") or config["text_config"]["torch_dtype"]]


def expected(pair, algorithm):
    draft_folder, target_folder = _folders(pair)
    draft, target = config_json(draft_folder), config_json(target_folder)
    eagle_config = draft.get("eagle_config") or {}
    aux = algorithm == "EAGLE3" and eagle_config.get("use_aux_hidden_state", True)
    if aux:
        extend = hidden_size_in(target) * len(eagle_config.get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
    elif algorithm == "STANDALONE":
        extend = hidden_size_in(draft)
    else:
        extend = hidden_size_in(target)
    return {
        "aux": bool(aux),
        "decode_width": hidden_size_in(draft),
        "decode_dtype": _dtype(draft),
        "extend_width": extend,
        "extend_dtype": _dtype(draft),
    }


@pytest.fixture(scope="module")
def probe(patched_root, libcuda_stub, tmp_path_factory):
    cases = [
        {"name": name, "draft": str(_folders(pair)[0]), "target": str(_folders(pair)[1]), "algorithm": algorithm}
        for name, pair, algorithm in CASES
    ]
    path = tmp_path_factory.mktemp("probe") / "cases.json"
    path.write_text(json.dumps(cases))
    result = run_python(patched_root, libcuda_stub, [str(SUPPORT / "probe_patched.py"), str(path)])
    assert result.returncode == 0, result.stderr[-4000:]
    return probe_json(result)


def test_probe_ran_the_patched_tree(probe, patched_root):
    assert probe["sglang_file"].startswith(str(patched_root))
    assert probe["errors"] == []


def test_every_worker_and_graph_runner_module_imports(probe):
    for module in ("eagle_worker", "multi_layer_eagle_worker", "eagle_worker_v2",
                   "multi_layer_eagle_worker_v2", "eagle_draft_cuda_graph_runner",
                   "eagle_draft_extend_cuda_graph_runner",
                   "multi_layer_eagle_draft_extend_cuda_graph_runner"):
        assert "sglang.srt.speculative." + module in probe["imports"]
    failures = {name: error for name, error in probe["imports"].items() if error != "ok"}
    assert failures == {}


@pytest.mark.parametrize("name,pair,algorithm", CASES, ids=[c[0] for c in CASES])
def test_classmethods_give_the_contract_sizes(probe, name, pair, algorithm):
    rows = [row for row in probe["sizes"] if row["case"] == name]
    workers = {"EAGLE": 4, "EAGLE3": 4, "STANDALONE": 2}[algorithm]
    assert len(rows) == workers, rows
    want = expected(pair, algorithm)
    for row in rows:
        got = {key: row[key] for key in want}
        assert got == want, row["worker"]


def test_dtype_rule_with_differing_draft_and_target_dtypes(probe):
    rows = [r for r in probe["sizes"] if r["case"].startswith("llama3.1-8b eagle3 (fp16")]
    assert rows and all(r["extend_dtype"] == r["decode_dtype"] == "torch.float16" for r in rows)


def test_no_aux_drafter_is_not_widened_by_the_multi_layer_worker(probe):
    rows = [r for r in probe["sizes"] if r["case"] == "llama3.1-8b eagle3 without aux"]
    multi_layer = [r for r in rows if r["worker"].startswith("MultiLayer")]
    assert multi_layer and all(r["extend_width"] == 4096 and r["aux"] is False for r in multi_layer)


def test_decode_idle_input_runs_through_the_patched_method(probe):
    idle = probe["decode_idle"]
    assert idle == {"type": "EagleDraftInput", "shape": [0, 4096], "dtype": "torch.float16"}


def test_verify_idle_input_is_an_extend_input_and_the_worker_resizes_it(probe):
    assert probe["verify_idle"]["type"] == "EagleDraftExtendInput"
    for worker in ("EAGLEWorker", "MultiLayerEagleWorker"):
        rebuilt = probe["extend_rebuild_" + worker]
        assert rebuilt["reached_forward"] is True
        assert rebuilt["type"] == "EagleDraftExtendInput"
        # llama3.1-8b EAGLE-3 with aux: 3 x 4096 from the target, in the draft's fp16
        assert rebuilt["shape"] == [0, 3 * 4096] == [0, rebuilt["expected_width"]]
        assert rebuilt["dtype"] == "torch.float16"


def test_pristine_multi_layer_worker_does_not_import_but_patched_does(pristine_root, libcuda_stub, probe):
    """0.5.11's known defect on Python 3.11+: ``-> ModelRunner`` names a TYPE_CHECKING import."""
    module = "sglang.srt.speculative.multi_layer_eagle_worker"
    result = run_python(pristine_root, libcuda_stub, ["-c", f"import {module}"])
    assert result.returncode != 0
    assert "NameError" in result.stderr and "ModelRunner" in result.stderr
    assert probe["imports"][module] == "ok"


def test_pd_metadata_buffers_take_the_decode_contract(probe):
    """Scheduler.init_disaggregation, run from the patched tree up to MetadataBuffers."""
    assert len(probe["pd"]) == 4
    for row in probe["pd"]:
        assert row["hidden_size"] is not None, row
        # llama3.1-8b EAGLE-3: the draft's width and fp16, not the target's bf16
        assert [row["hidden_size"], row["dtype"]] == row["contract"] == [4096, "torch.float16"]
