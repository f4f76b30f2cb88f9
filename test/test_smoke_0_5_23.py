"""``smoke`` on an SGLang 0.5.23 tree: served with the 0.5.23 environment, by the tree's family.

One case end to end (``cases_0_5_23.CI_CASES``: ``eagle3-v2``, every request shape) on a
patched copy of the 0.5.23 release wheel's ``sglang/``, with ``--no-baseline``: the tree without
speculation, the tree with it (tokens equal to both that run and transformers' ``generate``,
drafts accepted), the patch's parser called by the target's capture and the drafter's ``fc``
in the server. A server start costs about 90 s here; the 0.5.23 matrix, the unpatched release
beside the patched tree, is ``benchmark/smoke_matrix.py --family 0.5.23`` (docs/smoke.md).

The rest runs no server: the interpreter and stand-ins chosen by family, the case names, the
port of the one CPU operator 0.5.23's stand-ins replace with Python.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import run_cli
from sglang_eagle_sizing.families import AFTER_REFACTOR, BEFORE_REFACTOR
from sglang_eagle_sizing.families.release_0_5_11 import smoke_cases
from sglang_eagle_sizing.families.release_0_5_23 import smoke_cases as cases_0_5_23
from sglang_eagle_sizing.smoke import print_report
from sglang_eagle_sizing.smoke import server as smoke_server
from sglang_eagle_sizing.smoke.cases import case_named, cases_for
from sglang_eagle_sizing.wheel import cached_release_wheel


@pytest.fixture(scope="session")
def pristine_0_5_23_root(tmp_path_factory) -> Path:
    """``sglang/`` exactly as the 0.5.23 release wheel ships it. Do not modify."""
    root = tmp_path_factory.mktemp("pristine-0.5.23")
    with zipfile.ZipFile(cached_release_wheel("0.5.23")) as wheel:
        wheel.extractall(root, [n for n in wheel.namelist() if n.startswith("sglang/")])
    return root


@pytest.fixture(scope="session")
def patched_0_5_23_root(pristine_0_5_23_root, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("patched-0.5.23")
    shutil.copytree(pristine_0_5_23_root / "sglang", root / "sglang")
    code, _, err = run_cli("apply", "--quiet", str(root / "sglang"))
    assert code == 0, err
    return root


# -- one case served ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def served(patched_0_5_23_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("smoke-0.5.23")
    report = work / "report.json"
    names = [arg for name in cases_0_5_23.CI_CASES for arg in ("--case", name)]
    result = subprocess.run(
        [sys.executable, "-m", "sglang_eagle_sizing", "smoke",
         str(patched_0_5_23_root / "sglang"), *names, "--no-baseline",
         "--workdir", str(work), "--json", str(report)],
        capture_output=True, text=True, timeout=1800, check=False,
    )
    assert report.exists(), result.stdout[-4000:] + result.stderr[-4000:]
    return result, json.loads(report.read_text())


def test_eagle3_v2_serves_a_patched_0_5_23_tree_with_its_own_environment(served):
    result, report = served
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert report["failed"] == [] and report["family"] == AFTER_REFACTOR.name
    assert report["release"] == "0.5.23"
    assert "accept length (tree / 0.5.23)" in result.stdout.splitlines()[0]
    (entry,) = report["cases"]
    tree = entry["tree"]
    (plain,) = report["plain"].values()
    assert tree["status"] == plain["status"] == "served", tree["error"]
    for batch in smoke_cases.SHAPES:
        outputs = tree["outputs"][batch.name]
        assert [len(o) for o in outputs] == list(batch.max_new_tokens)
        assert outputs == plain["outputs"][batch.name]
    # the crafted drafter guesses: well above one token per verify
    assert tree["accept_length"] > 1.5


def test_the_patch_s_parser_ran_in_the_0_5_23_server(served):
    _, report = served
    records = report["cases"][0]["tree"]["sites"]
    callers = {(r["file"], r["scope"]) for r in records if r["function"] == "parse_eagle3_draft_config"}
    # the target's capture and the drafter's fc ask the one parser (0.5.23's own stand-ins
    # record it; 0.5.11's are not loaded)
    assert ("model_executor/model_runner_components/spec_aux_hidden_state.py",
            "_resolve_eagle_aux_hidden_state") in callers, records
    assert ("models/llama_eagle3.py", "LlamaModel.__init__") in callers, records


# -- a target served through its own class (issue 35) --------------------------------------

#: the one class case CI serves: Qwen3-MoE, whose capture delegates to its inner model, with a
#: speculators drafter (ids [1, 2, 3] are output_hidden_states indices); the rest of the class
#: table is benchmark/smoke_classes.py's (docs/smoke-classes.md)
CLASS_CASE = "qwen3-moe-eagle3-speculators-v2"


@pytest.fixture(scope="session")
def served_class(patched_0_5_23_root, tmp_path_factory):
    work = tmp_path_factory.mktemp("smoke-0.5.23-class")
    report = work / "report.json"
    result = subprocess.run(
        [sys.executable, "-m", "sglang_eagle_sizing", "smoke",
         str(patched_0_5_23_root / "sglang"), "--case", CLASS_CASE, "--no-baseline",
         "--workdir", str(work), "--json", str(report)],
        capture_output=True, text=True, timeout=1800, check=False,
    )
    assert report.exists(), result.stdout[-4000:] + result.stderr[-4000:]
    return result, json.loads(report.read_text())


def test_a_qwen3_moe_target_serves_through_its_own_class_and_captures_what_the_ids_name(
    served_class,
):
    result, report = served_class
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    (entry,) = report["cases"]
    tree = entry["tree"]
    assert tree["status"] == "served", tree["error"]
    # tokens: the same as the run without speculation (torch_native) and transformers'
    # generate (smoke's problems name any difference)
    assert entry["problems"] == [] and tree["outputs"]["long"]
    # the served Qwen3MoeForCausalLM (not a dense Qwen3) handed the drafter
    # output_hidden_states[1], [2], [3] of the same weights, in every prompt of the prefill
    capture = tree["capture"]
    assert entry["meant"] == ["1", "2", "3"]
    assert capture["captured"] == ["1", "2", "3"] and capture["consistent"], capture
    assert capture["prompts"] == 3 and capture["max_diff"] < 1e-3
    ((key, plain),) = report["plain"].items()
    assert "Qwen3MoeForCausalLM" in key and plain["status"] == "served"


# -- no server ------------------------------------------------------------------------------


def test_the_interpreter_is_chosen_by_the_tree_s_family(monkeypatch, tmp_path):
    monkeypatch.delenv(smoke_server.PYTHON_0_5_23_ENV, raising=False)
    assert smoke_server.interpreter_for(BEFORE_REFACTOR) == Path(sys.executable)
    made_by_setup = smoke_server.REPOSITORY / ".venv-0.5.23" / "bin" / "python"
    assert (smoke_server.REPOSITORY / "scripts" / "setup-0.5.23.sh").is_file()
    if made_by_setup.exists():
        assert smoke_server.interpreter_for(AFTER_REFACTOR) == made_by_setup
    named = tmp_path / "python"
    named.write_text("")
    monkeypatch.setenv(smoke_server.PYTHON_0_5_23_ENV, str(named))
    assert smoke_server.interpreter_for(AFTER_REFACTOR) == named
    assert smoke_server.interpreter_for(BEFORE_REFACTOR) == Path(sys.executable)
    server = smoke_server.Server(Path("/tree"), [], tmp_path / "log", {}, port=30000,
                                 python=str(smoke_server.interpreter_for(AFTER_REFACTOR)))
    assert server.command()[:3] == [str(named), "-m", "sglang.launch_server"]
    monkeypatch.setenv(smoke_server.PYTHON_0_5_23_ENV, str(tmp_path / "missing"))
    with pytest.raises(smoke_server.ServerError, match="no such interpreter to serve SGLang 0.5.23"):
        smoke_server.interpreter_for(AFTER_REFACTOR)


def test_each_family_loads_its_own_stand_ins_only():
    before, after = (smoke_server.standins_for(f) for f in (BEFORE_REFACTOR, AFTER_REFACTOR))
    assert before != after
    assert (before / "sitecustomize.py").is_file() and (after / "sitecustomize.py").is_file()
    env = smoke_server.server_env(Path("/tree"), Path("/stub"), None, {}, after)
    paths = env["PYTHONPATH"].split(":")
    assert paths[:2] == [str(after), "/tree"] and str(before) not in paths


def _standins(folder: Path = AFTER_REFACTOR.standins):
    """A family's stand-ins module (its import hook is installed only in a smoke server)."""
    spec = importlib.util.spec_from_file_location(f"_standins_{folder.name}", folder / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_standins_0_5_23 = _standins


def test_both_families_record_calls_with_one_recorder(tmp_path, monkeypatch):
    """Each family's stand-ins wrap a helper with smoke/standin_hooks.py's recorder: a server
    writes each call once per calling line, with the caller's scope."""
    monkeypatch.delenv("SGLANG_EAGLE_SIZING_SMOKE", raising=False)
    sites = tmp_path / "sites.jsonl"
    monkeypatch.setenv("SGLANG_EAGLE_SIZING_SMOKE_SITES", str(sites))
    for family in (BEFORE_REFACTOR, AFTER_REFACTOR):
        helper = _standins(smoke_server.standins_for(family))._recorded_function(
            "helper", lambda x: x + 1
        )

        def caller():
            return helper(1) + helper(2)

        assert caller() + caller() == 10
    calls = [json.loads(line) for line in sites.read_text().splitlines()]
    assert [(c["function"], c["scope"].rsplit(".", 1)[-1]) for c in calls] == [("helper", "caller")] * 2


def test_the_0_5_23_stand_ins_leave_the_sizing_helpers_alone():
    standins = _standins_0_5_23()
    touched = set(standins.AFTER_IMPORT)
    # the modules whose code sizes, types or lays out the hidden states are only recorded
    sizing = {"sglang.srt.speculative.eagle_utils", "sglang.srt.speculative.eagle3_draft_config"}
    assert standins.AFTER_IMPORT["sglang.srt.speculative.eagle3_draft_config"] is standins._patch_recorded
    assert not touched & {
        "sglang.srt.models.llama_eagle3",
        "sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state",
        "sglang.srt.configs.model_config",
        "sglang.srt.managers.scheduler",
    }
    assert sizing <= touched


def test_the_kv_copy_port_copies_rows_of_every_layer_reading_before_writing():
    import torch

    standins = _standins_0_5_23()
    layers = [torch.arange(24, dtype=torch.float32).reshape(6, 4) + 100 * i for i in range(3)]
    before = [layer.clone() for layer in layers]
    ptrs = torch.tensor([layer.data_ptr() for layer in layers], dtype=torch.int64)
    strides = torch.tensor([layer.stride(0) * layer.element_size() for layer in layers])
    # 1 -> 0 and 0 -> 1 swap: a copy that writes before it reads would copy row 1 twice
    standins.copy_all_layer_kv_cache_port(ptrs, strides, torch.tensor([0, 1, 5]), torch.tensor([1, 0, 2]))
    for layer, old in zip(layers, before):
        assert torch.equal(layer[0], old[1]) and torch.equal(layer[1], old[0])
        assert torch.equal(layer[5], old[2]) and torch.equal(layer[2:5], old[2:5])


def test_0_5_23_cases_are_named_as_0_5_11_s_with_v2_only():
    names = [case.name for case in cases_0_5_23.CASES]
    assert len(set(names)) == len(names)
    assert all(name.endswith("-v2") for name in names)
    # no v1 worker in 0.5.23: no case turns the overlap scheduler off itself
    assert not any(set(smoke_cases.V1) & set(case.flags) for case in cases_0_5_23.CASES)
    assert {
        "eagle3-v2", "standalone-v2", "eagle3-toplevel-ids-v2", "eagle3-4ids-v2",
        "eagle3-bf16-drafter-fp16-target-v2", "eagle3-dp-attention-v2", "eagle3-pd-v2",
        "eagle3-speculators-4ids-v2", "eagle3-speculators-3ids-v2", "standalone-pd-v2",
    } <= set(names)
    # where 0.5.11 has the case under a -v1 name, 0.5.23's is the same name with -v2
    old = {case.name for case in smoke_cases.CASES}
    for name in ("eagle3-toplevel-ids", "standalone", "eagle-", "eagle3-4ids", "eagle3-pd"):
        assert any(n.startswith(name) and n.endswith("-v1") for n in old), name
    assert all(case.known_error for case in cases_0_5_23.CASES if case.known_failure)
    assert set(cases_0_5_23.CI_CASES) <= set(names)
    assert cases_for(AFTER_REFACTOR) is cases_0_5_23.CASES
    assert cases_for(BEFORE_REFACTOR) is smoke_cases.CASES
    # the PD decode server on this CPU keeps its retraction backup off CUDA
    pd = case_named("eagle3-pd-v2", cases_0_5_23.CASES)
    assert pd.pd and pd.decode_flags == ("--disaggregation-decode-retraction-backup", "cpu_tensor")


def test_list_names_the_0_5_23_cases_of_a_0_5_23_tree(pristine_0_5_23_root):
    code, out, _ = run_cli("smoke", "--list", str(pristine_0_5_23_root / "sglang"))
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [c.name for c in cases_0_5_23.CASES]
    code, _, err = run_cli("smoke", "--case", "eagle3-v1", str(pristine_0_5_23_root / "sglang"))
    assert code == 2 and "no smoke case 'eagle3-v1' for SGLang 0.5.23" in err


def test_the_0_5_23_report_compares_with_0_5_23_and_lists_the_helpers_run(capsys):
    run = {"status": "served", "accept_length": 1.6, "sites": [
        {"function": "parse_eagle3_draft_config", "file": "models/llama_eagle3.py", "line": 157,
         "scope": "LlamaModel.__init__"}], "seconds": 90.0}
    report = {"family": AFTER_REFACTOR.name, "release": "0.5.23", "failed": [], "seconds": 90.0,
              "cases": [{"case": "eagle3-v2", "tree": run, "problems": [], "passed": True,
                         "known_failure": "", "expected_failure": False}]}
    print_report(report)
    out = capsys.readouterr().out
    assert "accept length (tree / 0.5.23)" in out and "helper callers" in out
    assert "sizing sites:" not in out  # 0.5.11's site list means nothing here
    assert "parse_eagle3_draft_config <- models/llama_eagle3.py:157 LlamaModel.__init__" in out


def test_a_served_target_must_hand_on_hidden_states_not_a_branch():
    """0.5.23's Gemma-3 handed on each layer's MLP branch without the residual: the tree
    passes when it captures the same layers' outputs, fails when it hands on a branch."""
    from sglang_eagle_sizing.smoke import capture_problems

    case = case_named("gemma3-eagle3-specforge-v2", cases_0_5_23.CASES)
    release = {"capture": {"captured": [f"mlp-branch-of-layer-{i}" for i in range(3)]}}

    def entry(captured):
        return {"tree": {"capture": {"captured": captured}}, "release": release}

    assert capture_problems(case, entry(["1", "2", "3"])) == []
    assert capture_problems(case, entry(["2", "3", "4"])) != []  # other layers
    problems = capture_problems(case, entry(release["capture"]["captured"]))
    assert problems and "not a hidden state" in problems[0]
