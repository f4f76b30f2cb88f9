"""``sglang-eagle-sizing smoke`` serves tokens from the patched tree on this CPU.

Two runs of the command on the patched 0.5.11 tree (fixture ``patched_root``) for the CI
subset (``smoke.cases.CI_CASES``):

- EAGLE-3 on the v1 worker with every request shape, and a drafter that start-up validation
  must refuse. It serves the tree without speculation, the tree with it, and the unpatched
  0.5.11 release (accept lengths must agree);
- EAGLE-3 under DP attention (``--tp 2 --dp 2 --enable-dp-attention``, one request: rank dp1
  is idle), v1 and v2 workers, a 32-wide drafter on a 64-wide Qwen3 target (so that an idle
  input of the target's width reaches the drafter's ``fc`` instead of passing for the
  drafter's own): tokens must equal the Qwen3 target's run
  without speculation and DP attention (and transformers'), and the idle-input sizing sites
  must have run in the server (v1: ``EAGLEWorker._draft_preprocess_idle`` and
  ``forward_draft_extend_after_decode``; v2: ``EAGLEWorkerV2.forward_batch_generation``).
  This run has ``--no-baseline``: 0.5.11 crashes in both cases (its idle inputs carry no
  ``kv_indptr``), which docs/smoke.md's matrix records; serving it here would add two DP
  server start-ups to CI and prove nothing the matrix does not.

Then four run-time mutants of the patched tree, served the same way, must be caught:

- ``target capture: layer ids shifted by one``: the target captures the hidden state after
  each one the drafter declares. On the 4-layer target ids ``[0, 1, 2]`` become the inputs
  of layers 2, 3 and 4, and there is no layer 4: the target hands the drafter 128 features
  for its ``fc`` of 192, and the server fails at the first draft extend. (Had the widths
  matched, the tokens would stay right, verification keeps greedy output exact, and the
  accept length would change: the test accepts a crash, other tokens or another accept
  length as caught.)
- ``rule refusal off: get_eagle_num_aux_hidden_states (num_aux_hidden_states)``: the drafter with
  a wrong ``num_aux_hidden_states`` is served instead of refused.
- ``idle: no attention indices``: ``EagleDraftInput.create_idle_input`` without the empty
  ``kv_indptr``/``kv_indices`` (0.5.11's idle input), served under DP attention on the v1
  worker: the idle rank's padded batch crashes in the Triton backend, as 0.5.11 does.
- ``site EAGLEWorkerV2.forward_batch_generation``: the v2 worker's idle input put back to
  0.5.11's width, the target's 64 (``self.target_worker.model_config.spec_hidden_size``):
  the idle rank's draft step hands 64 features to the 32-wide drafter, whose ``fc`` takes
  192, and the server crashes. With the 64-wide drafter this mutant serves unnoticed
  (docs/development/smoke-internals.md: ``scripts/smoke_mutants.py``).

Slow (several server start-ups; interpreted Triton attention): the full matrix runs from
``benchmark/smoke_matrix.py`` and is recorded in docs/smoke.md. The float16/bfloat16 cases
(issue 16) are not in this subset.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import SUPPORT
from sglang_eagle_sizing.families import BEFORE_REFACTOR
from sglang_eagle_sizing.families.release_0_5_11 import smoke_cases
from sglang_eagle_sizing.smoke.cases import case_named
from sglang_eagle_sizing.smoke.runner import (
    Models,
    differences,
    reference_case,
    serve_case,
    server_command,
    site_hits,
)
from sglang_eagle_sizing.wheel import cache_folder

sys.path.insert(0, str(SUPPORT))
from mutants import mutant_named, mutant_root  # noqa: E402

#: served with the unpatched release next to them (accept lengths must agree)
CASES = ("eagle3-v1", "eagle3-refused")
#: DP attention, an idle rank: served from the patched tree only (0.5.11 crashes); the
#: drafter is narrower than the target, so that an idle input of the wrong width reaches fc
DP_CASES = ("eagle3-dp-attention-narrow-drafter-v1", "eagle3-dp-attention-narrow-drafter-v2")
#: the idle-input sizing sites each DP case must run in the server (``file Class.method``)
IDLE_SITES = {
    "eagle3-dp-attention-narrow-drafter-v1": (
        "speculative/eagle_worker.py EAGLEWorker._draft_preprocess_idle",
        "speculative/eagle_worker.py EAGLEWorker.forward_draft_extend_after_decode",
    ),
    "eagle3-dp-attention-narrow-drafter-v2": (
        "speculative/eagle_worker_v2.py EAGLEWorkerV2.forward_batch_generation",
    ),
}


def run_smoke(root: Path, names: tuple[str, ...], work: Path, label: str, *extra: str):
    """``smoke`` on ``root`` for ``names`` (models shared in ``work``): (result, report)."""
    report = work / f"{label}.json"
    result = subprocess.run(
        [sys.executable, "-m", "sglang_eagle_sizing", "smoke", str(root / "sglang"),
         *[arg for name in names for arg in ("--case", name)],
         "--workdir", str(work), "--json", str(report), *extra],
        capture_output=True, text=True, timeout=1800, check=False,
    )
    return result, json.loads(report.read_text())


@pytest.fixture(scope="session")
def smoke_work(tmp_path_factory):
    return tmp_path_factory.mktemp("smoke")


@pytest.fixture(scope="session")
def smoke_run(patched_root, smoke_work):
    return (*run_smoke(patched_root, CASES, smoke_work, "report"), smoke_work)


@pytest.fixture(scope="session")
def dp_run(patched_root, smoke_work):
    return run_smoke(patched_root, DP_CASES, smoke_work, "dp", "--no-baseline")


def entry(report: dict, name: str) -> dict:
    return next(e for e in report["cases"] if e["case"] == name)


def test_ci_subset_is_the_declared_one():
    assert set(CASES) | set(DP_CASES) == set(smoke_cases.CI_CASES)
    assert set(IDLE_SITES) == set(DP_CASES)


def test_smoke_passes_on_the_patched_tree(smoke_run):
    result, report, _ = smoke_run
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert report["failed"] == []
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["case", "tokens", "equal"]
    assert any(line.startswith("eagle3-v1 ") and line.rstrip().endswith("ok") for line in lines)
    assert "smoke: all cases as expected" in result.stdout


def test_eagle3_tokens_equal_and_drafts_accepted(smoke_run):
    _, report, _ = smoke_run
    case = entry(report, "eagle3-v1")
    tree, release = case["tree"], case["release"]
    plain = next(iter(report["plain"].values()))
    assert tree["status"] == release["status"] == plain["status"] == "served"
    for batch in smoke_cases.SHAPES:
        outputs = tree["outputs"][batch.name]
        assert [len(o) for o in outputs] == list(batch.max_new_tokens)
        assert outputs == plain["outputs"][batch.name] == release["outputs"][batch.name]
    # the crafted drafter guesses: well above one token per verify, same as 0.5.11
    assert tree["accept_length"] > 1.5
    assert tree["accept_length"] == release["accept_length"]


def test_refused_drafter_stops_the_server_before_its_weights_load(smoke_run):
    _, report, _ = smoke_run
    tree = entry(report, "eagle3-refused")["tree"]
    assert tree["status"] == "refused"
    assert "Invalid num_aux_hidden_states=2 in the draft model config" in tree["error"]
    log = Path(tree["log"]).read_text(errors="replace")
    # the target's weights load; the drafter's never do
    assert log.count("Load weight begin") == 1, log[-3000:]


def test_contract_calls_are_recorded(smoke_run):
    _, report, _ = smoke_run
    records = entry(report, "eagle3-v1")["tree"]["sites"]
    functions = {r["function"] for r in records}
    assert {"parse_eagle_use_aux_hidden_state", "get_eagle_captured_layer_ids",
            "validate_eagle_draft_config"} <= functions, records
    callers = {r["scope"] for r in records if r["function"] == "get_eagle_captured_layer_ids"}
    assert "ModelRunner.__init__" in callers or any("model_runner" in r["file"] for r in records)
    # when every request of a batch finishes at verify (the first-verify batch), verify
    # builds the next draft input idle, with no worker in reach: the one sizing site a
    # single server runs
    assert "speculative/eagle_info.py EagleVerifyInput.verify" in site_hits(records, BEFORE_REFACTOR), records


@pytest.mark.parametrize("name", DP_CASES)
def test_idle_rank_under_dp_attention_serves_equal_tokens(dp_run, name):
    result, report = dp_run
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert report["failed"] == []
    case = entry(report, name)
    assert "release" not in case  # --no-baseline: 0.5.11 crashes here (docs/smoke.md)
    tree = case["tree"]
    plain = report["plain"]
    assert len(plain) == 1  # one run of the Qwen3 target: one rank, no DP attention
    plain = next(iter(plain.values()))
    assert tree["status"] == plain["status"] == "served", tree["error"]
    outputs = tree["outputs"]["one-request"]
    assert [len(o) for o in outputs] == list(smoke_cases.ONE.max_new_tokens)
    assert outputs == plain["outputs"]["one-request"]
    # the crafted drafter guesses under DP attention too
    assert tree["accept_length"] > 1.5


@pytest.mark.parametrize("name", DP_CASES)
def test_idle_rank_runs_the_idle_input_sizing_sites(dp_run, name):
    _, report = dp_run
    records = entry(report, name)["tree"]["sites"]
    ran = site_hits(records, BEFORE_REFACTOR)
    assert set(IDLE_SITES[name]) <= set(ran), ran
    # the idle inputs were sized by the contract, width and dtype, at those sites
    for site in IDLE_SITES[name]:
        scope = site.split()[1]
        called = {r["function"].rpartition(".")[2] for r in records if r["scope"] == scope}
        assert {"hidden_size_for", "dtype_for"} <= called, (site, called)


MUTANTS = (
    ("target capture: layer ids shifted by one", "eagle3-v1"),
    ("rule refusal off: get_eagle_num_aux_hidden_states (num_aux_hidden_states)", "eagle3-refused"),
    ("idle: no attention indices", "eagle3-dp-attention-narrow-drafter-v1"),
    # the v2 idle input put back to 0.5.11's width: the target's 64, for a 32-wide drafter
    ("site EAGLEWorkerV2.forward_batch_generation", "eagle3-dp-attention-narrow-drafter-v2"),
)


@pytest.mark.parametrize("name,case_name", MUTANTS, ids=[m[0] for m in MUTANTS])
def test_run_time_mutant_is_caught(
    name, case_name, smoke_work, patched_root, pristine, tmp_path, request
):
    mutant = mutant_named(name, pristine / "srt", patched_root / "sglang" / "srt")
    root = mutant_root(patched_root, mutant, tmp_path / "mutant")
    case = case_named(case_name, smoke_cases.CASES)
    if case_name in DP_CASES:  # compared with the patched tree's own run
        _, report = request.getfixturevalue("dp_run")
        reference = entry(report, case_name)["tree"]
    else:  # compared with the unpatched release
        _, report, _ = request.getfixturevalue("smoke_run")
        reference = entry(report, case_name).get("release")
        if case.expect == "serve":
            case = replace(case, batches=(smoke_cases.LONG,))
    run = serve_case(root, "mutant", case, Models(smoke_work / "models"), tmp_path, cache_folder())
    if case.expect == "refuse":
        assert run.status == "served", (run.status, run.error, run.log_tail)
        return
    assert reference["status"] == "served"
    caught = differences(run, reference, case.batches[:1])
    assert caught, f"{name} survived: {run.accept_lengths}"
    print(f"{name}: caught by {'; '.join(caught)}")


# -- no server ----------------------------------------------------------------------------


def test_the_reference_run_keeps_dp_attention_only_as_a_flag_of_the_target():
    target, drafter = Path("/models/target"), Path("/models/drafter")
    dp_flags = {"--tp", "--dp", "--enable-dp-attention"}
    # EAGLE-3 under DP attention: compared with one rank without it (crafted weights)
    case = case_named("eagle3-dp-attention-v1", smoke_cases.CASES)
    args, env = server_command(case, target, drafter)
    assert dp_flags <= set(args) and env == dict(smoke_cases.DP_ENV)
    args, env = server_command(reference_case(case), target, drafter, speculative=False)
    assert not (dp_flags | {"--speculative-algorithm"}) & set(args), args
    assert env == {}
    assert args[args.index("--attention-backend") + 1] == "torch_native"
    # MTP under DP attention: random weights differ with the TP group, so the reference is
    # served under DP attention too, with the environment DP attention needs on this CPU
    case = case_named("mtp-step3p5-dp-attention-v2", smoke_cases.CASES)
    args, env = server_command(reference_case(case), target, target, speculative=False)
    assert dp_flags <= set(args) and "--speculative-algorithm" not in args, args
    assert env == dict(smoke_cases.DP_ENV)
    assert reference_case(case).name != reference_case(smoke_cases.MTP).name


def test_a_crash_is_named_by_the_exception_the_log_ends_with():
    from sglang_eagle_sizing.smoke.runner import Run, _crashed

    tail = "\n".join((
        "[DP0 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x64 and 192x32)",
        "[DP0 TP0] TP size (2)is larger than numa node number (1) ... to avoid the "
        "out-of-memory error.",
    ))
    run = Run(case="c", tree="tree")
    _crashed(run, RuntimeError("/generate failed (no reply)"), tail)
    assert run.error == (
        "/generate failed (no reply): RuntimeError: mat1 and mat2 shapes cannot be "
        "multiplied (1x64 and 192x32)"
    )
    # under DP attention in 0.5.23, the other rank's lost gloo connection follows the cause,
    # which may be far from the log's end: the whole log is searched
    gloo = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:561] "
            "Connection closed by peer [127.0.0.1]:29061.")
    run = Run(case="c", tree="tree")
    _crashed(run, RuntimeError("/generate failed (no reply)"), gloo,
             "AttributeError: 'EagleVerifyInput' object has no attribute 'kv_indptr'\n"
             + "more log\n" * 100 + gloo)
    assert run.error == ("/generate failed (no reply): AttributeError: 'EagleVerifyInput' "
                         f"object has no attribute 'kv_indptr'; then {gloo}")
    # 0.5.23's crash diagnostics after the exception are not it
    run = Run(case="c", tree="tree")
    _crashed(run, RuntimeError("/generate failed (no reply)"), tail + "\n"
             "[2026-12-05 02:38:16] Pyspy failed (py-spy dump  --pid 4282). Error: /bin/sh: 1: "
             "py-spy: not found")
    assert run.error.endswith("(1x64 and 192x32)")
    run = Run(case="c", tree="tree")
    _crashed(run, RuntimeError("/generate failed (no reply): timed out"), tail.splitlines()[2])
    assert run.error == "/generate failed (no reply): timed out"
    # a DP server dying at start-up: the scheduler's exception, then the launcher's
    dp_tail = (
        "AssertionError: Attempted to load weight (torch.Size([32, 256])) into parameter "
        "(torch.Size([32, 192]))\n"
        "    raise EOFError\n"
        "EOFError\n"
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -3)."
    )
    run = Run(case="c", tree="tree")
    _crashed(run, RuntimeError("the server exited with code 1 while starting"), dp_tail)
    assert run.error == (
        "the server exited with code 1 while starting: AssertionError: Attempted to load "
        "weight (torch.Size([32, 256])) into parameter (torch.Size([32, 192])); then "
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -3)."
    )


def test_a_run_differs_from_a_saved_one_by_crash_tokens_or_accept_length():
    from sglang_eagle_sizing.smoke.runner import Run

    batches = (smoke_cases.LONG,)
    saved = {"outputs": {"long": [[1, 2]]}, "accept_lengths": {"long": 1.5}}
    run = Run(case="c", tree="mutant", status="served")
    run.outputs, run.accept_lengths = {"long": [[1, 2]]}, {"long": 1.5}
    assert differences(run, saved, batches) == []
    run.accept_lengths = {"long": 1.25}
    assert differences(run, saved, batches) == ["long: another accept length"]
    run.outputs = {"long": [[1, 3]]}
    assert differences(run, saved, batches) == ["long: other tokens", "long: another accept length"]
    run.status, run.error = "crashed", "RuntimeError: x"
    assert differences(run, saved, batches) == ["crashed: RuntimeError: x"]


def test_list_names_every_case():
    from conftest import run_cli

    code, out, _ = run_cli("smoke", "--list")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert names == [case.name for case in smoke_cases.CASES]
    assert "expected to fail" in next(l for l in out.splitlines() if l.startswith("eagle3-fp16"))


def test_unknown_case_is_an_error():
    from conftest import run_cli

    code, _, err = run_cli("smoke", "--case", "no-such-case")
    assert code == 2
    assert "no smoke case 'no-such-case'" in err


def test_pair_with_an_unsupported_target_is_refused_by_name(tmp_path):
    from conftest import DATA, run_cli

    pair = tmp_path / "falcon__specforge-eagle3"
    shutil.copytree(DATA / "qwen3-4b__specforge-eagle3", pair)
    config = pair / "target" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()),
                                  "architectures": ["FalconForCausalLM"]}))
    code, out, err = run_cli("smoke", "--pair", str(pair))
    assert code == 2 and out == ""
    assert "target architecture FalconForCausalLM is not supported by --pair" in err
    assert str(config) in err


def test_pair_keeps_what_decides_sizing():
    from conftest import DATA
    from sglang_eagle_sizing.smoke.pair import pair_case

    case = pair_case(DATA / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3")
    assert case.algorithm == "EAGLE3" and case.dtype == "auto"
    assert (case.target.dtype, case.drafter.dtype) == ("bfloat16", "float16")
    assert case.drafter.draft_vocab_size == round(512 * 32000 / 128256)
    assert case.known_failure  # issue 16
    noaux = pair_case(DATA / "llama3.1-8b-instruct__trtllm-2layer-noaux-fixture")
    assert noaux.drafter.use_aux_hidden_state is False and noaux.drafter.num_layers == 2
    assert pair_case(DATA / "llama-2-70b-chat__sglang-eagle1").algorithm == "EAGLE"
    qwen = pair_case(DATA / "qwen3-4b__specforge-eagle3")
    assert qwen.target.architecture == "Qwen3ForCausalLM"
    # no declared ids: a target deep enough for three distinct default layers [2, 4, 5]
    assert qwen.target.num_layers == 8
    moe = pair_case(DATA / "qwen3-30b-a3b__specforge-moe-draft-eagle3")
    # SGLang's ids [1, 23, 44] of a 48-layer target (hidden states 2, 24, 45) land on the
    # 4-layer tiny target's capturable hidden states 1..3, in order
    assert (moe.target.num_layers, moe.drafter.aux_layer_ids) == (4, (0, 1, 2))
    assert moe.target.architecture == "Qwen3MoeForCausalLM"
    speculators = pair_case(DATA / "llama3.1-8b-instruct__speculators-eagle3-4-aux-ids")
    # the speculators library's ids are the hidden states themselves: 4 of them need 5 layers
    assert (speculators.target.num_layers, speculators.drafter.aux_layer_ids) == (5, (1, 2, 3, 4))


def test_pair_on_a_0_5_23_tree_is_served_by_its_v2_worker():
    """0.5.23 has no v1 workers: a pair is served as its cases are, without 0.5.11's v1 flag,
    and its notes name 0.5.23."""
    from conftest import DATA
    from sglang_eagle_sizing.families import AFTER_REFACTOR
    from sglang_eagle_sizing.smoke.cases import V1
    from sglang_eagle_sizing.smoke.pair import pair_case

    eagle = DATA / "llama-2-70b-chat__sglang-eagle1"
    assert set(V1) <= set(pair_case(eagle).flags)
    assert not set(V1) & set(pair_case(eagle, AFTER_REFACTOR).flags)
    moe = pair_case(DATA / "qwen3-30b-a3b__specforge-moe-draft-eagle3", AFTER_REFACTOR)
    assert "not an architecture of SGLang 0.5.23" in moe.description


def test_pair_keeps_what_hidden_state_ids_mean():
    from sglang_eagle_sizing.smoke.pair import map_hidden_states

    # four hidden states near the end of a deep target stay distinct, the last layer's
    # input (47 of 48 layers) stays the tiny target's last layer's input
    layers, states = map_hidden_states([44, 45, 46, 47], 48)
    assert len(set(states)) == 4 and states == sorted(states)
    assert states[-1] == layers - 1
    # the first layer's output stays the first; the final hidden state (48), which no
    # target captures, stays the final one, and so does the embeddings (0)
    assert map_hidden_states([1, 24, 48], 48) == (4, [1, 2, 4])
    assert map_hidden_states([0, 2], 32)[1][0] == 0


@pytest.mark.parametrize(
    "pair, architecture",
    [("qwen3-30b-a3b__specforge-moe-draft-eagle3-toplevel-ids", "Qwen3MoeForCausalLM"),
     ("kimi-k2-instruct__specforge-eagle3", "DeepseekV3ForCausalLM"),
     ("gpt-oss-20b__specforge-eagle3", "GptOssForCausalLM"),
     ("gemma-3-27b-it__specforge-eagle3", "Gemma3ForCausalLM")],
)
def test_pair_keeps_the_target_s_class_and_says_so(pair, architecture):
    """Issue 35: a target whose capture rule or architecture is its own is served through its
    class (Gemma-3's multimodal checkpoint through its text class), not a dense stand-in."""
    from conftest import DATA
    from sglang_eagle_sizing.smoke.pair import pair_case

    case = pair_case(DATA / pair)
    assert case.target.architecture == architecture and case.target.own_class
    assert "served through its own class" in case.description
    assert "dense" not in case.description


def test_pair_ids_keep_the_branch_of_the_target_class_s_rule(tmp_path):
    """DeepSeek-V3 adds 1 only when the first id is 1, GPT-OSS keeps ids ending at
    num_hidden_layers as given: the tiny ids take the same branch as the real ones."""
    from conftest import DATA
    from sglang_eagle_sizing.smoke.pair import keep_rule_branch, pair_case

    kimi = pair_case(DATA / "kimi-k2-instruct__specforge-eagle3")  # [2, 30, 58]: as given
    assert kimi.drafter.aux_layer_ids[0] != 1
    pair = tmp_path / "deepseek-first-1"
    shutil.copytree(DATA / "kimi-k2-instruct__specforge-eagle3", pair)
    draft = pair / "draft" / "config.json"
    config = json.loads(draft.read_text())
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 30, 58]
    draft.write_text(json.dumps(config))
    first_one = pair_case(pair)
    assert first_one.drafter.aux_layer_ids[0] == 1
    ids = first_one.drafter.aux_layer_ids
    assert list(ids) == sorted(set(ids)) and ids[-1] + 1 < first_one.target.num_layers
    # GPT-OSS: the final boundary stays the final boundary, other ids stay below it
    assert keep_rule_branch("GptOssForCausalLM", [1, 11, 24], (0, 1, 3), 24, 4, "hf") == (
        4, (0, 1, 4))
    assert keep_rule_branch("GptOssForCausalLM", [1, 11, 21], (0, 1, 2), 24, 4, "hf") == (
        4, (0, 1, 2))
    # a speculators id k is SGLang's k - 1: [2, ...] reaches DeepSeek's rule as [1, ...]
    assert keep_rule_branch("DeepseekV3ForCausalLM", [2, 31, 59], (1, 2, 3), 61, 4,
                            "speculators")[1][0] == 2


def test_pair_shrinks_a_speculators_drafter_in_its_own_format():
    from conftest import DATA
    from sglang_eagle_sizing.smoke.pair import pair_case

    case = pair_case(DATA / "gpt-oss-20b__nm-testing-speculators-eagle3")
    assert case.algorithm == "EAGLE3" and case.drafter.format == "speculators"
    assert case.drafter.speculators_norms == ("norm_before_residual",)
    assert case.drafter.draft_vocab_size == round(512 * 32000 / 201088)
    # no ids: SGLang's default capture, three distinct layers of an 8-layer target
    assert case.drafter.aux_layer_ids is None and case.target.num_layers == 8
    assert "GptOssForCausalLM target served through its own class" in case.description
    assert "unquantized (its mxfp4 quantization" in case.description


def test_pair_reads_an_absent_norm_before_residual_as_vllm_does(tmp_path):
    """The speculators format without the key: true, as vLLM's update_eagle3 reads it."""
    from conftest import DATA
    from sglang_eagle_sizing.smoke.pair import pair_case

    pair = tmp_path / "pair"
    shutil.copytree(DATA / "gpt-oss-20b__nm-testing-speculators-eagle3", pair)
    draft = json.loads((pair / "draft/config.json").read_text())
    for present, norms in ((None, ("norm_before_residual",)), (False, ())):
        draft.pop("norm_before_residual", None)
        if present is not None:
            draft["norm_before_residual"] = present
        (pair / "draft/config.json").write_text(json.dumps(draft))
        assert pair_case(pair).drafter.speculators_norms == norms, present


@pytest.mark.parametrize(
    "drafter_format, layer_ids, first_state",
    # what each format's owner says an id means, as an index into transformers'
    # output_hidden_states: SGLang's id i is layer i's output, hidden state i + 1; the
    # speculators library's id is the index itself (the last layer's input included)
    [("hf", (0, 1, 2, 3), 1), ("speculators", (2, 3, 4, 5), 0)],
)
def test_layers_craft_drafts_only_from_the_layers_it_names(
    tmp_path, drafter_format, layer_ids, first_state
):
    """The layers craft, worked through without a server: from the target's own hidden states
    (transformers), the drafter's fc and mid layer guess the next 3 tokens right from the
    hidden states its ids mean and wrong from the next ones."""
    import torch
    from sglang_eagle_sizing.smoke import models
    from transformers import AutoModelForCausalLM

    target = models.TargetSpec(num_layers=6, craft="layers")
    drafter = models.DrafterSpec(
        aux_layer_ids=layer_ids, hidden_size=32, craft="layers", format=drafter_format
    )
    models.build_target(target, tmp_path / "t")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "t", dtype=torch.float32)
    ids = torch.tensor([[5, 77, 200, 301, 9, 40, 41, 42, 43]])
    states = model(ids, output_hidden_states=True).hidden_states
    assert model(ids).logits[0].argmax(-1).tolist() == [(x + 1) % 512 for x in ids[0].tolist()]
    w = {k: v.float() for k, v in models.layered_drafter_tensors(drafter, target).items()}

    def norm(x):
        return x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()

    def drafts(shift):
        aux = torch.cat([states[i + first_state + shift][0, -1] for i in layer_ids])
        h, out = aux @ w["fc.weight"].T, []
        for _ in range(3):
            n = norm(h)
            gate = n @ w["midlayer.mlp.gate_proj.weight"].T
            up = n @ w["midlayer.mlp.up_proj.weight"].T
            h = h + (torch.nn.functional.silu(gate) * up) @ w["midlayer.mlp.down_proj.weight"].T
            out.append(int((norm(h) @ w["lm_head.weight"].T).argmax()))
        return out

    assert drafts(0) == [45, 46, 47]  # at the token 43, given 44: 45, 46, 47
    for shift in (-1, 1):
        if all(1 <= i + first_state + shift <= 5 for i in layer_ids):
            assert not set(drafts(shift)) & {45, 46, 47}


def test_a_known_failure_is_expected_only_with_its_own_error():
    from sglang_eagle_sizing.smoke import is_expected_failure

    case = case_named("eagle3-fp16-drafter-bf16-target", smoke_cases.CASES)
    own = "crashed: /generate failed: InterpreterError: AttributeError(\"... no attribute 'get_bf16'\")"
    assert is_expected_failure(case, [own])
    assert not is_expected_failure(case, ["crashed: OSError: Repo id must be in the form ..."])
    assert not is_expected_failure(case, [own, "one-request: tokens differ from transformers' generate"])
    assert not is_expected_failure(case_named("eagle3-v1", smoke_cases.CASES), [own])
    assert all(case.known_error for case in smoke_cases.CASES if case.known_failure)


# -- targets served through their own class (issue 35): the capture oracle, no server -------


@pytest.fixture(scope="module")
def qwen3_moe_target(tmp_path_factory):
    from sglang_eagle_sizing.smoke.models import TargetSpec
    from sglang_eagle_sizing.smoke.targets import build_target

    folder = tmp_path_factory.mktemp("qwen3-moe") / "target"
    return build_target(TargetSpec(architecture="Qwen3MoeForCausalLM", num_layers=4), folder)


def _fake_record(folder, target, prompts, pick):
    """A recorder file as a server would write it: the prompts' tokens and positions one
    after the other, and as aux states the oracle's states ``pick`` names."""
    import torch
    from sglang_eagle_sizing.smoke.capture import oracle

    ids, positions, chunks = [], [], []
    for prompt in prompts:
        states = dict(oracle(target, list(prompt)))
        ids += prompt
        positions += range(len(prompt))
        chunks.append(torch.cat([states[label] for label in pick], dim=-1))
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"input_ids": torch.tensor(ids), "positions": torch.tensor(positions),
                "aux": [torch.cat(chunks)]}, folder / "aux-1-1.pt")
    return folder


def test_the_capture_oracle_names_each_captured_state_by_transformers_index(
    qwen3_moe_target, tmp_path
):
    from sglang_eagle_sizing.smoke.capture import captured_states

    prompts = smoke_cases.LONG.prompts
    right = _fake_record(tmp_path / "right", qwen3_moe_target, prompts, ["1", "2", "3"])
    got = captured_states(right, qwen3_moe_target, prompts, 64)
    assert got["captured"] == ["1", "2", "3"] and got["prompts"] == 3 and got["consistent"]
    # one layer later, up to the last layer's output before the final norm (what a model
    # that captures the final boundary hands on), which transformers' hidden_states[4] is not
    later = _fake_record(tmp_path / "later", qwen3_moe_target, prompts, ["2", "3", "4-pre"])
    assert captured_states(later, qwen3_moe_target, prompts, 64)["captured"] == [
        "2", "3", "4-pre"]
    assert "error" in captured_states(tmp_path / "none", qwen3_moe_target, prompts, 64)


def test_class_targets_load_in_transformers_as_built(qwen3_moe_target):
    """The class target is transformers' own checkpoint: every tensor loads (none left at
    random init), and greedy generate mostly steps each token by one (the shift craft)."""
    import torch
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        qwen3_moe_target, dtype=torch.float32, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    out = model.generate(torch.tensor([[5, 77, 200]]), max_new_tokens=6, do_sample=False)
    steps = (out[0, 3:] - out[0, 2:-1]).tolist()
    assert steps.count(1) >= 4, steps


def test_class_cases_of_both_families_name_their_class_and_drafter_style():
    from sglang_eagle_sizing.families.release_0_5_23 import smoke_cases as cases_0_5_23
    from sglang_eagle_sizing.smoke.class_cases import CLASSES, STYLES

    for cases, worker in ((smoke_cases.CASES, "v1"), (cases_0_5_23.CASES, "v2")):
        named = {c.name: c for c in cases if c.compare_capture}
        assert set(named) == {f"{k}-eagle3-{s}-{worker}" for k in CLASSES for s in STYLES}
        for name, case in named.items():
            assert case.target.architecture == CLASSES[name.split("-eagle3-")[0]][0]
            assert case.drafter.format == ("speculators" if "-speculators-" in name else "hf")


def test_a_speculators_id_l_means_the_last_layers_output_before_the_norm():
    """The speculators library's id ``L`` (its ``launch_vllm.py --include-last-layer``) is the
    last layer's output before the final norm, as vLLM captures it, not transformers'
    ``hidden_states[L]`` (after the norm); SGLang's ids in ``eagle_config`` mean what the
    class's own rule captures, so nothing is expected of them here."""
    from sglang_eagle_sizing.smoke.capture import meant_states
    from sglang_eagle_sizing.smoke.class_cases import class_case

    gpt_oss = class_case("gpt-oss", "speculators", "v2")
    assert meant_states(gpt_oss.drafter, gpt_oss.target) == ["1", "2", "4-pre"]
    assert meant_states(class_case("qwen3-moe", "speculators", "v2").drafter,
                        class_case("qwen3-moe", "speculators", "v2").target) == ["1", "2", "3"]
    specforge = class_case("gpt-oss", "specforge", "v2")
    assert meant_states(specforge.drafter, specforge.target) is None
