"""``sglang-eagle-sizing report``: runs with no arguments, its first line naming the release and
the tree it judged by; says per tree (patched, released) what serving the pair does and the
target class's capture rule; marks what 0.5.11 computed otherwise; no ``None`` in its text;
its JSON round-trips."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_eagle_sizing.cli import main
from sglang_eagle_sizing.report import render


def _verdicts(out: str) -> dict[str, str]:
    """{"patched": ..., "released": ...}: the two lines under ``serving (--dtype auto):``."""
    lines = out.splitlines()
    start = lines.index("serving (--dtype auto):")
    found = {}
    for line in lines[start + 1 : start + 3]:
        side, _, verdict = line.strip().partition(":")
        found[side] = verdict.strip()
    return found


def test_report_with_no_arguments(capsys):
    from sglang_eagle_sizing.tree import SglangTree

    assert main(["report"]) == 0
    out = capsys.readouterr().out
    # judged by the installed sglang (0.5.11, not patched), and the first line says so
    assert out.splitlines()[0] == f"report: {SglangTree.locate(None).describe()} (released)"
    assert out.splitlines()[1] == "EAGLE3 pair (eagle_use_aux_hidden_state: yes)"
    assert "decode phase (EagleDraftInput)" in out and "extend phase (EagleDraftExtendInput)" in out
    assert "settings: cuda_graph_max_bs=160" in out
    # the fp16 drafter is now built in its bf16 target's dtype, and the report says so
    draft_line = next(line for line in out.splitlines() if line.startswith("  draft "))
    assert draft_line.endswith(
        "float16; built in bfloat16 patched, the target's dtype (--dtype auto; released builds "
        "it in float16)"
    )
    assert _verdicts(out) == {
        "patched": "serves (the draft model built in the target's bfloat16, not its config's "
        "float16; one log line)",
        "released": "fails at the first request in fc (the draft model built in its config's "
        "float16 reads the target's bfloat16 hidden states: BFloat16 != Half)",
    }
    assert "  released: released (the class's method on a stand-in): " in out
    assert "None" not in out
    # the v2 idle input took the target's bf16 in 0.5.11 and still does; the v2 graph
    # buffer took the draft's fp16 and now takes bf16
    lines = [line.split() for line in out.splitlines() if line.startswith("  v2 ")]
    v2_idle = next(row for row in lines if row[1] == "EAGLEWorkerV2.forward_batch_generation")
    assert v2_idle[2:] == ["4096", "bfloat16", "-", "same"]
    v2_graph = next(row for row in lines if row[1] == "EAGLEDraftCudaGraphRunner.__init__")
    assert v2_graph[2:4] == ["4096", "bfloat16"] and v2_graph[6:8] == ["!", "4096"]
    assert v2_graph[8] == "float16"
    assert "site values differ between patched and released (marked !)" in out


def test_report_json_round_trips_and_counts_buffer_bytes(tree, capsys):
    assert main(["apply", "-q", str(tree)]) == 0
    assert main(["report", "--json", "--sglang", str(tree)]) == 0
    text = capsys.readouterr().out
    report = json.loads(text)
    assert json.loads(json.dumps(report)) == report
    assert "saved by apply" in report["pristine_source"]
    settings = report["settings"]
    rows = {(r["worker"], r["site"], r["occurrence"]): r for r in report["sites"]}
    extend = rows[("v1", "EAGLEDraftExtendCudaGraphRunner.__init__", 0)]
    tokens = settings["cuda_graph_max_bs"] * (settings["speculative_num_steps"] + 1)
    # built in the target's bf16 now, the drafter's fp16 in 0.5.11 (same bytes)
    assert extend["width"] == 3 * 4096 and extend["dtype"] == "torch.bfloat16"
    assert extend["pristine"]["dtype"] == "torch.float16"
    assert extend["bytes"] == extend["pristine"]["bytes"] == tokens * 3 * 4096 * 2
    assert extend["differs_from_pristine"] is True
    assert report["draft"]["dtype"] == "torch.float16" and report["draft_built_dtype"] == "torch.bfloat16"
    multi_layer = rows[("v2 multi-layer", "MultiLayerEagleDraftExtendCudaGraphRunner.init_buffers_and_capture", 0)]
    assert multi_layer["pristine"]["width"] == 4096 and multi_layer["width"] == 3 * 4096
    assert multi_layer["differs_from_pristine"] is True


def test_report_names_a_missing_folder(capsys, tmp_path):
    assert main(["report", str(tmp_path / "nope"), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "nope/config.json" in err


def test_report_lists_both_pd_servers_and_marks_where_0_5_11_disagreed(capsys):
    """STANDALONE: 0.5.11's prefill server sized the PD hidden-state buffer at the draft's width
    and dtype, its decode server at 16 float32; both servers are listed, the decode one marked."""
    data = Path(__file__).parent / "data"
    draft = data / "qwen3-4b__specforge-eagle3" / "target"
    target = data / "qwen3-30b-a3b__specforge-moe-draft-eagle3" / "target"
    assert main(["report", str(draft), str(target), "--algorithm", "STANDALONE"]) == 0
    out = capsys.readouterr().out
    for kind in ("v1", "v2"):
        rows = [line.split() for line in out.splitlines() if "Scheduler.init_disaggregation" in line and line.split()[0] == kind]
        sides = {row[2]: row for row in rows}
        assert set(sides) == {"(prefill", "(decode"}
        assert sides["(prefill"][4:6] == ["2560", "bfloat16"] and sides["(prefill"][-1] == "same"
        assert sides["(decode"][4:6] == ["2560", "bfloat16"] and sides["(decode"][-3:] == ["!", "16", "float32"]
        assert (
            f"! PD ({kind}): released, the two servers disagreed on the hidden-state buffer: "
            "prefill 2560 bfloat16 (5120 B per request), decode 16 float32 (64 B)"
        ) in out


def test_report_eagle3_pd_servers_agree_in_0_5_11_too(capsys):
    assert main(["report", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    pd = [r for r in report["sites"] if r["site"] == "Scheduler.init_disaggregation"]
    assert {(r["worker"], r["detail"]) for r in pd} == {
        (kind, side) for kind in ("v1", "v1 multi-layer", "v2", "v2 multi-layer")
        for side in ("prefill server", "decode server")
    }
    assert report["pd_disagreements"] == []


def test_report_reads_a_speculators_drafter_and_shows_its_fc(capsys):
    """The CLI on the shared speculators-format pair: no refusal, the adaptation said, and the
    drafter's fc three target layers wide (it declares no aux layer ids)."""
    pair = Path(__file__).parent / "data" / "gpt-oss-20b__nm-testing-speculators-eagle3"
    assert main(["report", str(pair / "draft"), str(pair / "target")]) == 0
    out = capsys.readouterr().out
    assert (
        f"  adapted: {pair / 'draft' / 'config.json'}: the speculators format, read by the "
        "patched tree's speculators_eagle3_to_llama_config as LlamaForCausalLMEagle3"
    ) in out
    fc = [line.split() for line in out.splitlines() if "LlamaModel.__init__ (fc)" in line]
    assert [row[0] for row in fc] == ["v1", "v1", "v2", "v2"]  # v1, v1 multi-layer, v2, v2 multi-layer
    # width and dtype follow the site; the drafter is built in the target's float16
    assert {tuple(row[row.index("(fc)") + 1 :][:2]) for row in fc} == {("8640", "float16")}


def test_report_says_which_hidden_states_each_drafter_is_handed(capsys):
    """``captured_hidden_states``: indices into transformers' output_hidden_states (0: the
    embeddings), in that one convention whatever the drafter's: SGLang's ids name the layer
    whose output is read (hidden state id + 1), the speculators library's and those at the top
    level of a config (vLLM's key) are the indices themselves, and without ids SGLang's default,
    the inputs of layers [2, L // 2, L - 3]."""
    data = Path(__file__).parent / "data"
    for name, captured in (
        ("qwen3-30b-a3b__specforge-moe-draft-eagle3", [2, 24, 45]),
        ("qwen3-30b-a3b__specforge-moe-draft-eagle3-toplevel-ids", [1, 23, 44]),
        ("llama3.1-8b-instruct__speculators-eagle3-4-aux-ids", [2, 10, 18, 29]),
        ("llama3.1-8b-instruct__specforge-llama3-8b-eagle3", [2, 16, 29]),
    ):
        pair = data / name
        assert main(["report", "--json", str(pair / "draft"), str(pair / "target")]) == 0
        patched = json.loads(capsys.readouterr().out)["patched"]
        assert patched["captured_hidden_states"] == captured, name
    pair = data / "llama-2-70b-chat__sglang-eagle1"
    assert main(["report", "--json", str(pair / "draft"), str(pair / "target")]) == 0
    assert json.loads(capsys.readouterr().out)["patched"]["captured_hidden_states"] is None


def test_report_refuses_a_target_class_that_captures_nothing(capsys):
    """0.5.11's Gemma-3 classes have no set_eagle3_layers_to_capture (the release loads the
    weights, then raises AttributeError): refused, naming the class, before the drafter's ids
    (61 of 62 layers, which no class captures either) are looked at."""
    pair = Path(__file__).parent / "data" / "gemma-3-27b-it__specforge-eagle3"
    assert main(["report", str(pair / "draft"), str(pair / "target")]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: The target model Gemma3ForConditionalGeneration does not capture EAGLE-3 aux "
        "hidden states (no set_eagle3_layers_to_capture): --speculative-algorithm EAGLE3 "
        "cannot serve it.\n"
    )


def test_report_names_a_speculators_drafters_own_ids_and_folder(capsys, tmp_path):
    """A speculators drafter whose ids reach the final hidden state (32 of a 32-layer target)
    is refused naming its folder and its ids as its config.json declares them, not the
    adapted copy or SGLang's k - 1."""
    import shutil

    pair = Path(__file__).parent / "data" / "llama3.1-8b-instruct__speculators-eagle3-4-aux-ids"
    draft = tmp_path / "draft"
    shutil.copytree(pair / "draft", draft)
    config = json.loads((draft / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [2, 10, 18, 32]
    (draft / "config.json").write_text(json.dumps(config))
    assert main(["report", str(draft), str(pair / "target")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"error: Invalid eagle_aux_hidden_state_layer_ids=[2, 10, 18, 32] in the draft model "
        f"config {draft} for the target model config {pair / 'target'}: expected hidden-state "
        "indices 1 to 31"
    ), err


# -- what the report could not read -----------------------------------------------------
BUNDLED = Path(__file__).resolve().parents[1] / "python/sglang_eagle_sizing/data"
PAIR = BUNDLED / "llama3.1-8b-instruct__specforge-llama3-8b-eagle3"


def _pair_with(tmp_path: Path, draft_config) -> tuple[Path, Path]:
    """A copy of the bundled pair whose drafter's config.json is ``draft_config`` (text, or a
    function of the parsed config giving the new one)."""
    import shutil

    draft, target = tmp_path / "draft", tmp_path / "target"
    shutil.copytree(PAIR / "draft", draft)
    shutil.copytree(PAIR / "target", target)
    path = draft / "config.json"
    if callable(draft_config):
        path.write_text(json.dumps(draft_config(json.loads(path.read_text()))))
    else:
        path.write_text(draft_config)
    return draft, target


def _report_in_a_fresh_process(draft: Path, target: Path):
    """(exit code, stderr, whether SGLang was imported) of ``report`` in a new interpreter."""
    import subprocess
    import sys

    probe = (
        "import sys\nfrom sglang_eagle_sizing.cli import main\n"
        f"code = main(['report', {str(draft)!r}, {str(target)!r}])\n"
        "print('SGLANG-IMPORTED', 'sglang' in sys.modules, code)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=600
    )
    last = result.stdout.splitlines()[-1].split()
    return int(last[2]), result.stderr, last[1] == "True"


def test_a_config_that_is_not_json_is_one_line_before_sglang_is_imported(tmp_path):
    draft, target = _pair_with(tmp_path, "{not json")
    code, err, imported = _report_in_a_fresh_process(draft, target)
    assert code == 2 and not imported
    assert err.startswith(f"error: {draft / 'config.json'}: not JSON (") and len(err.splitlines()) == 1


def test_a_config_without_architectures_is_named_by_file_and_key(tmp_path):
    def without(config):
        del config["architectures"]
        return config

    draft, target = _pair_with(tmp_path, without)
    code, err, imported = _report_in_a_fresh_process(draft, target)
    assert code == 2 and not imported
    assert err == (
        f"error: {draft / 'config.json'}: no architectures (SGLang picks the model class by "
        "architectures[0])\n"
    )


def test_a_missing_hidden_size_is_named_with_the_default_it_takes(tmp_path, capsys):
    def without(config):
        del config["hidden_size"]
        return config

    draft, target = _pair_with(tmp_path, without)
    assert main(["report", str(draft), str(target)]) == 0
    out = capsys.readouterr().out
    assert (
        f"  defaulted: {draft / 'config.json'}: no hidden_size; it takes the default of "
        "LlamaConfig (transformers): 4096"
    ) in out.splitlines()
    assert "defaulted: " + str(target) not in out


# -- every shared pair, both families, one schema ---------------------------------------
REPO = Path(__file__).resolve().parents[1]


def _all_pairs_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "report_all_pairs", REPO / "scripts" / "report_all_pairs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _assert_text(text: str, report: dict) -> None:
    """The text of a report: its first line names the release and tree, a verdict per tree,
    no ``None`` anywhere."""
    first = text.splitlines()[0]
    assert first == f"report: {report['tree']['described']} (released)", first
    verdicts = _verdicts(text)
    assert set(verdicts) == {"patched", "released"}, verdicts
    for verdict in verdicts.values():
        assert verdict == "serves" or verdict.startswith(
            ("serves (", "serves, handing the drafter other states ",
             "fails at the first request in ", "refused at start-up (", "fails at start-up (")
        ), verdict
    assert "None" not in text, [line for line in text.splitlines() if "None" in line]


def _assert_schema(report: dict) -> None:
    from sglang_eagle_sizing.report.release_0_5_23 import SIDE_KEYS

    for key in ("family", "algorithm", "draft", "target", "refusal", "patched", "pristine",
                "pristine_source", "adaptations", "sites"):
        assert key in report, key
    assert "path" in report["draft"] and "path" in report["target"]
    for side in ("patched", "pristine"):
        assert set(SIDE_KEYS) <= set(report[side]), side
    assert "captured_hidden_states" not in report  # one place: each tree's own object


def test_report_answers_every_shared_pair_on_0_5_11(capsys):
    """Every pair of test/data and /work/shared/drafters (one run per distinct pair): the JSON
    of both trees, exit 0 or a refusal the patched tree names; each capture from the target
    class's own method: Qwen3-MoE's delegated to its inner model, DeepSeek-V3's (Kimi-K2) and
    GPT-OSS's adding 1 in 0.5.11."""
    reports = {}
    for name, folders in _all_pairs_script().pairs().items():
        folder = folders[0]
        code = main(["report", "--json", str(folder / "draft"), str(folder / "target")])
        captured = capsys.readouterr()
        report = json.loads(captured.out)
        assert code == 0 or (code == 2 and report["refusal"]), (name, captured.err)
        _assert_schema(report)
        assert report["family"] == "0.5.9-0.5.11"
        _assert_text(render(report), report)
        reports[name] = report
    assert len(reports) >= 12
    moe = reports["qwen3-30b-a3b__specforge-moe-draft-eagle3"]["patched"]
    assert (moe["target_class"], moe["set_on"]) == ("Qwen3MoeForCausalLM", "self.model (Qwen3MoeModel)")
    assert moe["captured_hidden_states"] == [2, 24, 45]
    kimi = reports["kimi-k2-instruct__specforge-eagle3"]
    assert kimi["patched"]["target_class"] == "DeepseekV3ForCausalLM"
    assert kimi["patched"]["captured_hidden_states"] == kimi["pristine"]["captured_hidden_states"] == [3, 31, 59]
    oss = reports["gpt-oss-20b__specforge-eagle3"]
    assert oss["pristine"]["captured_hidden_states"] == [2, 12, 22]
    # the release reads no speculators-format drafter; the patched tree does
    spec = reports["gpt-oss-20b__nm-testing-speculators-eagle3"]
    assert "speculators format" in spec["pristine"]["refusal"]
    assert spec["patched"]["captured_hidden_states"] == [2, 12, 21]
    # 0.5.11's Gemma-3 class has no set_eagle3_layers_to_capture: the release raises
    gemma = reports["gemma-3-27b-it__specforge-eagle3"]
    assert gemma["pristine"]["capture_error"].startswith("AttributeError")


def test_report_answers_a_sample_of_shared_pairs_on_0_5_23():
    """``report --sglang`` on 0.5.23 (each run two processes of ~20 s; scripts/report_all_pairs.py
    runs every pair into docs/development/report-all-pairs.md): a delegating class (Qwen3-MoE), a
    multimodal one (Gemma-3, its language_model and text_config) and an mxfp4-quantized
    config (GPT-OSS), each captured by the class's own method."""
    from concurrent.futures import ThreadPoolExecutor

    script = _all_pairs_script()
    if script.TREES["0.5.23"] is None:
        raise AssertionError(".venv-0.5.23 has no sglang; bash scripts/setup.sh makes it")
    sources = script.pairs()
    names = ("qwen3-30b-a3b__specforge-moe-draft-eagle3", "gemma-3-27b-it__specforge-eagle3",
             "gpt-oss-20b__specforge-eagle3")
    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip(names, pool.map(lambda n: script.run_report("0.5.23", sources[n][0]), names)))
    from sglang_eagle_sizing.report.release_0_5_23 import render as render_0_5_23

    for name, run in runs.items():
        assert script.answered(run), (name, run["stderr"])
        _assert_schema(run["report"])
        _assert_text(render_0_5_23(run["report"]), run["report"])
    moe = runs[names[0]]["report"]
    assert moe["pristine"]["set_on"] == "self.model (Qwen3MoeModel)"
    assert moe["pristine"]["captured_hidden_states"] == [2, 24, 45]
    gemma = runs[names[1]]["report"]["pristine"]
    assert gemma["target_class"] == "Gemma3ForConditionalGeneration"
    assert gemma["set_on"] == "self.language_model.model (Gemma3TextModel)"
    assert gemma["captured_hidden_states"] == [2, 30, 62]  # 62 layers: the final boundary
    # Gemma-3's model captures its last layer's output: the patched tree serves it as well
    patched = runs[names[1]]["report"]["patched"]
    assert (patched["refusal"], patched["captured_hidden_states"]) == (None, [2, 30, 62])
    # the tensor each tree hands on, from the audit: the release's MLP branches (#39286)
    assert gemma["captured_tensor"]["tensor"] == "mlp-branch"
    assert patched["captured_tensor"]["tensor"] == "hidden-states"
    oss = runs[names[2]]["report"]
    assert any("quantization_config (mxfp4)" in note for note in oss["adaptations"])
    assert oss["pristine"]["captured_hidden_states"] == [2, 12, 22]


# -- what serving does, from the values (report/serving.py) -----------------------------
def _side(**values) -> dict:
    from sglang_eagle_sizing.report import serving

    side = {
        "refusal": None,
        "capture_error": None,
        "draft_dtype": "torch.bfloat16",
        "eagle_use_aux_hidden_state": True,
        "layer_ids": [1, 29, 61],
        "target_class": "Target",
        "capture_method": "Target.set_eagle3_layers_to_capture",
        "captured_hidden_states": [2, 30, 62],
        "final_boundary": "yes (TargetModel.forward tests `len(self.layers) in ...`)",
        **values,
    }
    side["capture_rule"] = serving.capture_rule(side, patched=False)
    return side


TARGET = {"dtype": "torch.bfloat16", "hidden_size": 64, "num_layers": 62}


def _verdict(side: dict, fc_width=3 * 64, config_dtype="torch.bfloat16") -> str:
    from sglang_eagle_sizing.report import serving

    return serving.verdict(
        side, algorithm="EAGLE3", target=TARGET, fc_width=fc_width, config_dtype=config_dtype
    )


def test_a_verdict_is_derived_from_what_the_trees_computed():
    assert _verdict(_side()) == "serves"
    # the last layer's output, which this forward never captures: fc gets two states of three
    no_final = _side(final_boundary="no (TargetModel.forward tests the layer loop's index only)")
    assert _verdict(no_final) == (
        "fails at the first request in fc (fc takes 192 features, the target hands it 2 hidden "
        "states of 64 (its forward never reaches [62]: the last layer's output))"
    )
    assert _verdict(_side(), fc_width=4 * 64).startswith("fails at the first request in fc (fc takes 256")
    # --dtype auto: the draft model in its config's float16 reads bfloat16 hidden states
    assert _verdict(_side(draft_dtype="torch.float16"), config_dtype="torch.float16") == (
        "fails at the first request in fc (the draft model built in its config's float16 reads "
        "the target's bfloat16 hidden states: BFloat16 != Half)"
    )
    assert _verdict(_side(), config_dtype="torch.float16") == (
        "serves (the draft model built in the target's bfloat16, not its config's float16; one "
        "log line)"
    )
    refused = _side(refusal="Invalid eagle_config.eagle_aux_hidden_state_layer_ids=[1, 29, 61] in ...")
    assert _verdict(refused) == "refused at start-up (eagle_config.eagle_aux_hidden_state_layer_ids)"
    raised = _side(capture_error="AttributeError: no set_eagle3_layers_to_capture")
    assert _verdict(raised) == "fails at start-up (AttributeError: no set_eagle3_layers_to_capture)"


def test_the_tensor_each_tree_hands_on_is_the_audits():
    """From the audit (data/captured_tensors.json, written by scripts/captured_tensors_table.py
    with its table; test_captured_tensors.py probes a sample against it): 0.5.23's released
    Gemma-3 hands on each layer's MLP branch, the patched one the hidden states; what the audit
    did not run is said to be unaudited, never guessed."""
    from sglang_eagle_sizing.report.captured_tensors import handed_on

    released = handed_on("0.5.23", "Gemma3ForConditionalGeneration", "pristine")
    assert (released["tensor"], released["trained_on"]) == ("mlp-branch", False)
    patched = handed_on("0.5.23", "Gemma3ForConditionalGeneration", "patched")
    assert (patched["tensor"], patched["trained_on"]) == ("hidden-states", True)
    assert handed_on("0.5.11", "DeepseekV3ForCausalLM", "pristine")["trained_on"] is True
    assert handed_on("0.5.10", "LlamaForCausalLM", "patched") == {
        "tensor": None,
        "trained_on": None,
        "audited_on": None,
        "described": "not audited on SGLang 0.5.10 (the audit covers SGLang 0.5.11 and 0.5.23)",
    }
    stopped = handed_on("0.5.23", "MiniMaxM2ForCausalLM", "patched")
    assert stopped["trained_on"] is None
    assert stopped["described"].startswith("not audited: stopped on the CPU (")
    # serving on the branch: it serves, and the verdict says what the drafter is handed
    assert _verdict(_side(captured_tensor=released)) == (
        "serves, handing the drafter other states than it was trained on (each layer's MLP "
        "branch without the residual)"
    )
    assert _verdict(_side(captured_tensor=patched)) == "serves"


def test_a_class_that_declares_its_rule_is_asked_before_anything_is_built():
    """A patched class's ``get_eagle3_layers_to_capture(config, layer_ids)`` is its rule,
    asked of the class (no instance); a patched class without it is ``undeclared`` and keeps
    the release's method on a stand-in; a released tree's is ``released``."""
    from types import SimpleNamespace

    from sglang_eagle_sizing.report import _capture_rules, serving

    class Declaring:
        eagle3_captures_final_hidden_state = True

        def __init__(self):
            raise AssertionError("built")

        @classmethod
        def get_eagle3_layers_to_capture(cls, config, layer_ids=None):
            ids = layer_ids or [1, config.num_hidden_layers // 2, config.num_hidden_layers - 1]
            return [i + 1 for i in ids]

    rules = _capture_rules()
    config = SimpleNamespace(num_hidden_layers=62)
    declared = rules.declared_rule(Declaring, config, [1, 29, 61])
    assert declared == {
        "method": "Declaring.get_eagle3_layers_to_capture",
        "captures_final_hidden_state": True,
        "captured_hidden_states": [2, 30, 62],
        "error": None,
    }
    assert rules.declared_rule(object, config, None) is None
    patched = _side(declared=declared, captured_hidden_states=[2, 30, 61])
    rule = serving.capture_rule(patched, patched=True)
    assert (rule["kind"], rule["captured_hidden_states"]) == ("declared", [2, 30, 62])
    assert serving.rule_text(rule, "Declaring") == (
        "declared by Declaring.get_eagle3_layers_to_capture"
    )
    undeclared = serving.capture_rule(_side(declared=None), patched=True)
    assert undeclared["kind"] == "undeclared"
    assert serving.rule_text(undeclared, "Target").startswith(
        "undeclared (Target has no get_eagle3_layers_to_capture): the release's rule, "
        "Target.set_eagle3_layers_to_capture on a stand-in"
    )
    # a released tree's class is never read as declaring
    assert serving.capture_rule(_side(declared=declared), patched=False)["kind"] == "released"


def test_from_another_checkout_it_says_the_installed_tree_was_judged(
    tmp_path, monkeypatch, capsys
):
    """Run from an SGLang checkout without --sglang: a note names the installed tree it
    judged; a pair it stops on still gets the first line before the one error line."""
    from sglang_eagle_sizing.report import command
    from sglang_eagle_sizing.tree import SglangTree

    (tmp_path / "python" / "sglang" / "srt").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)

    def refused(*args):
        raise ValueError("Invalid num_aux_hidden_states=2 in the draft model config")

    monkeypatch.setattr(command, "build", refused)
    assert main(["report", str(PAIR / "draft"), str(PAIR / "target")]) == 2
    captured = capsys.readouterr()
    installed = SglangTree.locate(None)
    assert captured.err.splitlines() == [
        f"note: judged the installed sglang ({installed.describe()}), not the checkout here; "
        "--sglang . judges the checkout",
        "error: Invalid num_aux_hidden_states=2 in the draft model config",
    ]
    assert captured.out == f"report: {installed.describe()} (released)\n"
