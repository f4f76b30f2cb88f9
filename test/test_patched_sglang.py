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

# (case name, pair folder or (draft folder, target folder), algorithm); the cases named in
# PD_CASES also run Scheduler.init_disaggregation on both servers.
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

PD_CASES = {
    "llama3.1-8b eagle3 (fp16 draft, bf16 target)",
    "llama-2-70b eagle",
    "qwen3-4b standalone for qwen3-30b-a3b",
}
PAIR = DATA / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3"

TORCH_DTYPES = {"float16": "torch.float16", "bfloat16": "torch.bfloat16"}
ELEMENT_BYTES = {"torch.float16": 2, "torch.bfloat16": 2, "torch.float32": 4}


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
    # EAGLE drafters are built in the target's dtype (at --dtype auto, the target config's);
    # a STANDALONE draft model keeps its own
    dtype = _dtype(draft) if algorithm == "STANDALONE" else _dtype(target)
    return {
        "aux": bool(aux),
        "decode_width": hidden_size_in(draft),
        "decode_dtype": dtype,
        "extend_width": extend,
        "extend_dtype": dtype,
    }


#: The EAGLE pair whose drafter declares float16 and its target bfloat16.
FP16_ON_BF16 = PAIR
EAGLE1 = DATA / "llama-2-70b-chat__sglang-eagle1"


def dtype_cases(folder):
    """(--dtype, pair) cases for the start-up dtype decision: the float16 EAGLE-3 drafter on
    its bfloat16 target at auto and at both explicit dtypes; an EAGLE drafter (float16) on
    a copy of its target that declares bfloat16; a pair that agrees (nothing to decide)."""
    bf16_target = folder / "llama-2-70b-bf16-target"
    bf16_target.mkdir()
    config = config_json(EAGLE1 / "target")
    assert config["torch_dtype"] == "float16" == config_json(EAGLE1 / "draft")["torch_dtype"]
    config["torch_dtype"] = "bfloat16"
    (bf16_target / "config.json").write_text(json.dumps(config))
    fp16_draft = str(FP16_ON_BF16 / "draft")
    cases = [
        {"name": f"eagle3 fp16 on bf16, --dtype {dtype}", "draft": fp16_draft,
         "target": str(FP16_ON_BF16 / "target"), "algorithm": "EAGLE3", "dtype": dtype}
        for dtype in ("auto", "float16", "bfloat16")
    ]
    cases.append({"name": "eagle fp16 on bf16, --dtype auto", "draft": str(EAGLE1 / "draft"),
                  "target": str(bf16_target), "algorithm": "EAGLE", "dtype": "auto"})
    agree = DATA / "qwen3-4b__specforge-eagle3"
    cases.append({"name": "eagle3 bf16 on bf16, --dtype auto", "draft": str(agree / "draft"),
                  "target": str(agree / "target"), "algorithm": "EAGLE3", "dtype": "auto"})
    return cases


@pytest.fixture(scope="module")
def probe(patched_root, libcuda_stub, tmp_path_factory):
    cases = [
        {"name": name, "draft": str(_folders(pair)[0]), "target": str(_folders(pair)[1]),
         "algorithm": algorithm, "pd": name in PD_CASES}
        for name, pair, algorithm in CASES
    ]
    folder = tmp_path_factory.mktemp("probe")
    path = folder / "cases.json"
    path.write_text(json.dumps(cases))
    # Start-up: the real llama3.1-8b EAGLE-3 pair, and the same drafter (hidden size 4096, no
    # target_hidden_size) for a target made 5120 wide: the drafter's fc cannot take it.
    wide_target = folder / "target-5120"
    wide_target.mkdir()
    config = config_json(PAIR / "target")
    config.update(hidden_size=5120, num_attention_heads=40, head_dim=128)
    (wide_target / "config.json").write_text(json.dumps(config))
    start_up_cases = [
        {"name": "good", "draft": str(PAIR / "draft"), "target": str(PAIR / "target"), "algorithm": "EAGLE3"},
        {"name": "bad", "draft": str(PAIR / "draft"), "target": str(wide_target), "algorithm": "EAGLE3"},
    ]
    start_up_path = folder / "start_up.json"
    start_up_path.write_text(json.dumps(start_up_cases))
    dtype_path = folder / "start_up_dtypes.json"
    dtype_path.write_text(json.dumps(dtype_cases(folder)))
    result = run_python(
        patched_root,
        libcuda_stub,
        [str(SUPPORT / "probe_patched.py"), str(path), str(start_up_path), str(dtype_path)],
    )
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
    """The fp16 drafter, built as the patched start-up builds it at --dtype auto: both
    phases take the target's bf16 (0.5.11's v1 sites took fp16, its v2 idle input bf16)."""
    rows = [r for r in probe["sizes"] if r["case"].startswith("llama3.1-8b eagle3 (fp16")]
    assert config_json(PAIR / "draft")["torch_dtype"] == "float16"
    assert rows and all(r["extend_dtype"] == r["decode_dtype"] == "torch.bfloat16" for r in rows)


def test_no_aux_drafter_is_not_widened_by_the_multi_layer_worker(probe):
    rows = [r for r in probe["sizes"] if r["case"] == "llama3.1-8b eagle3 without aux"]
    multi_layer = [r for r in rows if r["worker"].startswith("MultiLayer")]
    assert multi_layer and all(r["extend_width"] == 4096 and r["aux"] is False for r in multi_layer)


def test_decode_idle_input_runs_through_the_patched_method(probe):
    idle = probe["decode_idle"]
    assert idle == {"type": "EagleDraftInput", "shape": [0, 4096], "dtype": "torch.bfloat16"}


def test_verify_idle_input_is_an_extend_input_and_the_worker_resizes_it(probe):
    assert probe["verify_idle"]["type"] == "EagleDraftExtendInput"
    for worker in ("EAGLEWorker", "MultiLayerEagleWorker"):
        rebuilt = probe["extend_rebuild_" + worker]
        assert rebuilt["reached_forward"] is True
        assert rebuilt["type"] == "EagleDraftExtendInput"
        # llama3.1-8b EAGLE-3 with aux: 3 x 4096 from the target, in its bf16 (the fp16
        # drafter is built in the target's dtype)
        assert rebuilt["shape"] == [0, 3 * 4096] == [0, rebuilt["expected_width"]]
        assert rebuilt["dtype"] == "torch.bfloat16"


def test_pristine_multi_layer_worker_does_not_import_but_patched_does(pristine_root, libcuda_stub, probe):
    """0.5.11's known defect on Python 3.11+: ``-> ModelRunner`` names a TYPE_CHECKING import."""
    module = "sglang.srt.speculative.multi_layer_eagle_worker"
    result = run_python(pristine_root, libcuda_stub, ["-c", f"import {module}"])
    assert result.returncode != 0
    assert "NameError" in result.stderr and "ModelRunner" in result.stderr
    assert probe["imports"][module] == "ok"


PD_WORKERS = {
    "EAGLE": {"EAGLEWorker", "EagleDraftWorker"},
    "EAGLE3": {"EAGLEWorker", "EagleDraftWorker"},
    "STANDALONE": {"StandaloneWorker", "StandaloneDraftWorker"},
}


@pytest.mark.parametrize("name", sorted(PD_CASES))
def test_pd_prefill_and_decode_servers_give_the_hidden_state_buffer_one_item_size(probe, name):
    """The patched Scheduler.init_disaggregation, run in prefill and in decode mode with the real
    MetadataBuffers: the prefill server writes items of its own length into the decode server's
    slots, so the item lengths must be equal, and be the decode contract's width and dtype."""
    rows = [r for r in probe["pd"] if r["case"] == name]
    algorithm = rows[0]["algorithm"]
    assert {r["worker"] for r in rows} == PD_WORKERS[algorithm]
    for worker in PD_WORKERS[algorithm]:
        sides = {r["mode"]: r for r in rows if r["worker"] == worker}
        assert set(sides) == {"prefill", "decode"}
        assert all(r["reached_queues"] for r in sides.values())
        prefill, decode = sides["prefill"], sides["decode"]
        assert prefill["hidden_states_item_bytes"] == decode["hidden_states_item_bytes"], worker
        width, dtype = prefill["contract"]
        assert prefill["hidden_states"] == decode["hidden_states"] == [width, dtype]
        assert prefill["hidden_states_item_bytes"] == width * ELEMENT_BYTES[dtype]


def test_pd_standalone_buffer_is_the_draft_models_width(probe):
    """qwen3-4b (2560 wide, bf16) drafting for qwen3-30b-a3b (2048): the draft's width on both
    servers; 0.5.11's decode server had 16 float32 (64 bytes) here."""
    rows = [r for r in probe["pd"] if r["algorithm"] == "STANDALONE"]
    assert rows and {r["hidden_states_item_bytes"] for r in rows} == {2560 * 2}


def _start_up(probe, case):
    return {r["worker"]: r for r in probe["start_up"] if r["case"] == case}


EAGLE_WORKERS = {"EAGLEWorker", "EagleDraftWorker", "MultiLayerEagleWorker", "MultiLayerEagleDraftWorker"}


def test_a_bad_drafter_is_refused_before_the_draft_model_is_built(probe):
    """Each EAGLE worker's patched __init__, with the draft TpModelWorker / ModelRunner replaced
    by a sentinel: the refusal comes first, the sentinel is never reached."""
    rows = _start_up(probe, "bad")
    assert set(rows) == EAGLE_WORKERS
    for worker, row in rows.items():
        assert row["outcome"] == "refused", (worker, row)
        assert row["sentinel_calls"] == [], worker
        assert "target_hidden_size=None" in row["message"] and "expected 5120" in row["message"]
        assert str(PAIR / "draft") in row["message"] and "target-5120" in row["message"]


def test_a_good_drafter_reaches_the_draft_model_with_its_attributes_set(probe):
    """The same harness with the real pair: the sentinel is reached (the harness can tell), and
    by then the worker holds what the classmethods read."""
    rows = _start_up(probe, "good")
    assert set(rows) == EAGLE_WORKERS
    for worker, row in rows.items():
        assert row["outcome"] == "draft model built", (worker, row)
        assert row["sentinel_calls"], worker
        assert row["eagle_use_aux_hidden_state"] is True, worker
        assert row["eagle_num_aux_hidden_states"] == 3, worker


# -- the dtype the draft model is built in (start-up, real TpModelWorker up to the ModelRunner)
def _dtype_rows(probe, case):
    return {r["worker"]: r for r in probe["start_up_dtypes"] if r["case"] == case}


def _every_dtype(worker, row):
    """Every dtype a worker kind's row must record: the target's hidden states, the draft
    ModelConfig the draft TpModelWorker built (the draft weights, and the embedding and
    lm_head they share, are created in it), both classmethods, the v1 workers' own idle
    inputs, and the PD buffers of both servers. A missing key fails: no site is skipped."""
    keys = ["target", "draft_model_config", "decode_dtype_for", "extend_dtype_for"]
    if worker in ("EAGLEWorker", "MultiLayerEagleWorker"):
        keys += ["v1_worker_model_config", "decode_idle", "extend_idle"]
    values = {key: row[key] for key in keys}
    if not worker.startswith("MultiLayer"):
        assert set(row["pd"]) == {"prefill", "decode"}, row
        values.update({f"pd {mode}": dtype for mode, dtype in row["pd"].items()})
    return values


@pytest.mark.parametrize(
    "case", ["eagle3 fp16 on bf16, --dtype auto", "eagle fp16 on bf16, --dtype auto"]
)
def test_a_float16_drafter_on_a_bfloat16_target_gets_one_dtype_everywhere(probe, case):
    """At --dtype auto 0.5.11 built the float16 drafter in float16 next to its bfloat16
    target; every worker kind now builds it in the target's dtype, says so once, and every
    site follows."""
    rows = _dtype_rows(probe, case)
    assert set(rows) == EAGLE_WORKERS
    for worker, row in rows.items():
        assert row["outcome"] == "draft model built", (worker, row)
        assert row["before"] == "torch.float16", worker
        assert set(_every_dtype(worker, row).values()) == {"torch.bfloat16"}, (worker, row)
        assert row["server_args_dtype"] == "bfloat16", worker
        (line,) = row["log"]
        assert "gives float16" in line and "gives bfloat16" in line, line
        assert "the draft model is built in bfloat16" in line, line


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_an_explicit_dtype_keeps_its_meaning_for_both_models(probe, dtype):
    """--dtype float16 / bfloat16 give both models that dtype, as in 0.5.11 (``before``:
    what 0.5.11's draft TpModelWorker builds from the same arguments); nothing is logged."""
    rows = _dtype_rows(probe, f"eagle3 fp16 on bf16, --dtype {dtype}")
    assert set(rows) == EAGLE_WORKERS
    for worker, row in rows.items():
        assert row["outcome"] == "draft model built", (worker, row)
        assert row["server_args_dtype"] == dtype and row["log"] == [], worker
        assert row["before"] == f"torch.{dtype}", worker
        assert set(_every_dtype(worker, row).values()) == {f"torch.{dtype}"}, (worker, row)


def test_a_drafter_of_the_targets_dtype_changes_nothing(probe):
    rows = _dtype_rows(probe, "eagle3 bf16 on bf16, --dtype auto")
    assert set(rows) == EAGLE_WORKERS
    for worker, row in rows.items():
        assert row["server_args_dtype"] == "auto" and row["log"] == [], worker
        assert row["before"] == row["draft_model_config"] == "torch.bfloat16", worker
        assert set(_every_dtype(worker, row).values()) == {"torch.bfloat16"}, (worker, row)
