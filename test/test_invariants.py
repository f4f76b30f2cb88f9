"""The sizing contract holds for every shared drafter/target pair, on the patched 0.5.11 tree.

Site values are evaluated from each tree's own site expressions (``evaluate.py``) with real
``ModelConfig``s: the idle inputs', the CUDA-graph buffers' (the runners' own width and dtype
expressions), the PD metadata buffers'. Expected producer and consumer widths are computed here
from the config.json files alone.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import pytest
from conftest import DATA, REPO, config_json, hidden_size_in
from sglang_eagle_sizing.report import Trees, build_for_pair, infer_algorithm
from sglang_eagle_sizing.report.configs import ConfigError, load_pair
from sglang_eagle_sizing.tree import SglangTree

PAIRS = sorted(p.name for p in DATA.iterdir() if (p / "draft").is_dir())
#: speculators-format drafters: the patched tree reads them (``speculators_eagle3_to_llama_config``)
SPECULATORS = "gpt-oss-20b__nm-testing-speculators-eagle3"  # no aux layer ids: 3
FOUR_IDS = "llama3.1-8b-instruct__speculators-eagle3-4-aux-ids"  # 4 ids at the top level
IDS = "eagle_aux_hidden_state_layer_ids"
# STANDALONE: a smaller model of the same family drafts for the target, no EAGLE head.
STANDALONE = ("qwen3-4b__specforge-eagle3/target", "qwen3-30b-a3b__specforge-moe-draft-eagle3/target")


@pytest.fixture(scope="module")
def trees(pristine):
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    with Trees(SglangTree.locate(pristine)) as trees:
        yield trees


@pytest.fixture(scope="module")
def reports(trees):
    out = {}
    for name in PAIRS:
        pair = load_pair(DATA / name / "draft", DATA / name / "target", trees.patched)
        out[name] = build_for_pair(pair, infer_algorithm(pair.draft), trees)
    pair = load_pair(DATA / STANDALONE[0], DATA / STANDALONE[1], trees.patched)
    out["standalone"] = build_for_pair(pair, "STANDALONE", trees)
    return out


def _groups(report):
    groups = {}
    for row in report["sites"]:
        groups.setdefault((row["worker"], row["phase"]), []).append(row)
    return groups


def test_every_shared_pair_is_covered(reports):
    assert set(reports) == set(PAIRS) | {"standalone"}
    algorithms = {r["algorithm"] for r in reports.values()}
    assert algorithms == {"EAGLE", "EAGLE3", "STANDALONE"}
    kinds = {row["worker"] for r in reports.values() for row in r["sites"]}
    assert kinds == {"v1", "v1 multi-layer", "v2", "v2 multi-layer"}
    assert {r["eagle_use_aux_hidden_state"] for r in reports.values() if r["algorithm"] == "EAGLE3"} == {True, False}


def speculators_fc_in_features(folder: Path) -> int:
    """The input width of ``fc`` in the speculators library's own EAGLE-3 draft model built
    from the config (on the meta device: no weights). The shared config was trimmed of
    ``speculators_model_type``, which the library needs to read it; it is ``eagle3``."""
    import torch
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig

    config = config_json(folder)
    config.setdefault("speculators_model_type", "eagle3")
    with torch.device("meta"):
        return Eagle3DraftModel(Eagle3SpeculatorConfig.from_dict(config)).fc.in_features


def _fc_rows(report: dict) -> list[dict]:
    return [r for r in report["sites"] if r["kind"] == "drafter fc"]


@pytest.mark.parametrize("name, fc", [(SPECULATORS, 3 * 2880), (FOUR_IDS, 4 * 4096)])
def test_a_speculators_drafter_is_reported_at_every_site(reports, name, fc):
    """No refusal: the patched tree's own reader converts the format, the report says so, and
    every site has a width and a dtype; the drafter's fc takes (ids declared, else 3) x the
    target's hidden size, as the speculators library's own model of that config does."""
    draft, target = config_json(DATA / name / "draft"), config_json(DATA / name / "target")
    assert "speculators_config" in draft and "hidden_size" not in draft
    assert fc == len(draft.get(IDS) or [0, 0, 0]) * hidden_size_in(target)
    assert fc == speculators_fc_in_features(DATA / name / "draft")
    report = reports[name]
    assert report["draft"]["architecture"] == "LlamaForCausalLMEagle3"
    assert any(
        note.startswith(f"{DATA / name / 'draft' / 'config.json'}: the speculators format, read by "
                        "the patched tree's speculators_eagle3_to_llama_config as LlamaForCausalLMEagle3")
        for note in report["adaptations"]
    )
    assert all(r["error"] is None and r["width"] and r["dtype"] for r in report["sites"])
    rows = _fc_rows(report)
    assert {r["worker"] for r in rows} == {"v1", "v1 multi-layer", "v2", "v2 multi-layer"}
    assert {(r["width"], r["dtype"]) for r in rows} == {(fc, report["draft_built_dtype"])}
    # 0.5.11's fc is three target layers wide whatever the drafter declares
    assert {r["pristine"]["width"] for r in rows} == {3 * hidden_size_in(target)}
    extend = {r["width"] for r in report["sites"] if r["phase"] == "extend" and not r["rebuilt_by_worker"]}
    assert extend == {fc}


def test_the_target_captures_the_four_layers_a_speculators_drafter_declares(trees):
    from sglang_eagle_sizing.report.evaluate import load_eagle_info, load_spec_info

    declared = config_json(DATA / FOUR_IDS / "draft")[IDS]
    pair = load_pair(DATA / FOUR_IDS / "draft", DATA / FOUR_IDS / "target", trees.patched)
    eagle_info = load_eagle_info(trees.patched)
    # the library's ids index the target's hidden states: SGLang's layer ids are one less
    sglang_ids = [k - 1 for k in declared]
    assert _target_capture(trees.patched, pair.draft, eagle_info, pair.target) == (True, sglang_ids)
    assert load_spec_info(trees.patched).get_eagle_num_aux_hidden_states(pair.draft.hf_config) == 4


@pytest.mark.parametrize(
    "key, value",
    [("model_type", "qwen3"), ("num_hidden_layers", 2)],
)
def test_what_the_speculators_reader_refuses_is_a_clear_error(trees, tmp_path, key, value):
    import json
    import shutil

    shutil.copytree(DATA / SPECULATORS, tmp_path / "pair")
    path = tmp_path / "pair" / "draft" / "config.json"
    config = json.loads(path.read_text())
    config["transformer_layer_config"][key] = value
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: .*transformer_layer_config\.{key}"):
        load_pair(path.parent, tmp_path / "pair" / "target", trees.patched)


def test_a_tree_without_the_speculators_reader_is_named(trees):
    """0.5.11 has no reader of the format: asked to read it with that tree, load_pair says so."""
    only_patched = r"draft/config\.json: .* speculators format, which only a patched tree reads"
    with pytest.raises(ConfigError, match=only_patched):
        load_pair(DATA / SPECULATORS / "draft", DATA / SPECULATORS / "target", trees.pristine)


@pytest.mark.parametrize("name", [*PAIRS, "standalone"])
def test_idle_inputs_and_buffers_of_a_phase_agree(reports, name):
    for (kind, phase), rows in _groups(reports[name]).items():
        assert all(r["error"] is None for r in rows), rows
        values = {(r["width"], r["dtype"]) for r in rows if not r["rebuilt_by_worker"]}
        assert len(values) == 1, (kind, phase, rows)


def produced_width(name: str, report: dict) -> int:
    """What the target emits for the draft-extend forward, from the config files."""
    if name == "standalone":
        return hidden_size_in(config_json(DATA / STANDALONE[0]))  # the draft model does not read it
    draft, target = config_json(DATA / name / "draft"), config_json(DATA / name / "target")
    eagle_config = draft.get("eagle_config") or {}
    if report["eagle_use_aux_hidden_state"]:
        num_aux = len(eagle_config.get(IDS) or draft.get(IDS) or [1, 2, 3])
        return num_aux * hidden_size_in(target)
    return hidden_size_in(target)  # one hidden state (hc_mult is 1 for every shared target)


@pytest.mark.parametrize("name", PAIRS)
def test_extend_width_is_what_the_target_produces_and_the_drafter_accepts(reports, name, pristine):
    draft = config_json(DATA / name / "draft")
    report = reports[name]
    produced = produced_width(name, report)
    extend = {r["width"] for r in report["sites"] if r["phase"] == "extend" and not r["rebuilt_by_worker"]}
    assert extend == {produced}
    if report["eagle_use_aux_hidden_state"] and "LlamaForCausalLMEagle3" in draft["architectures"]:
        pair = load_pair(DATA / name / "draft", DATA / name / "target")
        assert produced == fc_in_features(pristine, pair.draft.hf_config)


def fc_in_features(pristine: Path, draft_hf_config) -> int:
    """The input width of the EAGLE-3 draft model's ``fc``, from 0.5.11's own
    ``llama_eagle3.py``: the statements of the ``__init__`` that builds ``self.fc`` which set
    what its first argument reads, run with the drafter's config."""
    import ast
    from types import SimpleNamespace

    module = ast.parse((pristine / "srt" / "models" / "llama_eagle3.py").read_text())
    for function in ast.walk(module):
        if not isinstance(function, ast.FunctionDef):
            continue
        for index, stmt in enumerate(function.body):
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) else None
            if target is not None and ast.unparse(target) == "self.fc":
                in_features = stmt.value.args[0]
                read = {ast.unparse(n) for n in ast.walk(in_features) if isinstance(n, ast.Attribute)}
                setup = [
                    s for s in function.body[:index]
                    if any(ast.unparse(n) in read for n in ast.walk(s) if isinstance(n, ast.Attribute)
                           and isinstance(getattr(n, "ctx", None), ast.Store))
                ]
                scope = {"self": SimpleNamespace(), "config": draft_hf_config}
                exec(compile(ast.Module(body=setup, type_ignores=[]), "llama_eagle3.py", "exec"), scope)
                return eval(compile(ast.Expression(body=in_features), "llama_eagle3.py", "eval"), scope)
    raise AssertionError("no self.fc in llama_eagle3.py")


@pytest.mark.parametrize("name", [*PAIRS, "standalone"])
def test_where_0_5_11_sites_agreed_nothing_changes(reports, name):
    """Where 0.5.11's sites of a phase agreed, and (extend) with what the target produces:
    a correctly configured setup sees no change. Multi-layer EAGLE-3 with aux is the case
    where they agreed on a width the target does not produce (docs/design.md)."""
    checked = 0
    report = reports[name]
    produced = produced_width(name, report)
    for (kind, phase), rows in _groups(report).items():
        live = [r for r in rows if not r["rebuilt_by_worker"]]
        old = {(r["pristine"]["width"], r["pristine"]["dtype"]) for r in live}
        if len(old) == 1 and (phase == "decode" or next(iter(old))[0] == produced):
            checked += 1
            ((width, dtype),) = old
            if report["draft_built_dtype"] != report["draft"]["dtype"]:
                dtype = report["draft_built_dtype"]  # the drafter now follows the target
            assert {(r["width"], r["dtype"]) for r in live} == {(width, dtype)}, (kind, phase)
    assert checked > 0


def auto_dtype(config: dict) -> str:
    """The dtype a config gets at --dtype auto, from the config file: its declared dtype, a
    float32 (or undeclared) one as float16 (gemma: bfloat16)."""
    text = config.get("text_config") or {}
    declared = config.get("torch_dtype") or config.get("dtype") or text.get("torch_dtype")
    if declared in (None, "float32"):
        return "torch.bfloat16" if config.get("model_type", "").startswith("gemma") else "torch.float16"
    return f"torch.{declared}"


@pytest.mark.parametrize("name", [*PAIRS, "standalone"])
def test_every_site_takes_the_dtype_of_the_targets_hidden_states(reports, name):
    """One dtype for every idle input and buffer of every worker kind and phase, PD buffers
    of both servers included: an EAGLE drafter's is the target's at --dtype auto (it consumes
    the target's hidden states and shares its embedding and lm_head); a STANDALONE draft
    model keeps its own. Expected dtypes come from the config files."""
    report = reports[name]
    if name == "standalone":
        want = auto_dtype(config_json(DATA / STANDALONE[0]))
    else:
        want = auto_dtype(config_json(DATA / name / "target"))
        assert report["target"]["dtype"] == want
    assert report["draft_built_dtype"] == want
    sites = [r for r in report["sites"] if not r["rebuilt_by_worker"]]
    assert {r["worker"] for r in sites} == ({"v1", "v2"} if name == "standalone" else
                                            {"v1", "v1 multi-layer", "v2", "v2 multi-layer"})
    assert {r["dtype"] for r in sites} == {want}, name


def test_0_5_11_defects_show_in_the_values(reports):
    noaux = reports["llama3.1-8b-instruct__trtllm-2layer-noaux-fixture"]
    old = {r["pristine"]["width"] for r in noaux["sites"] if r["site"] == "MultiLayerEagleWorker.forward_draft_extend_after_decode"}
    assert old == {3 * 4096}  # 0.5.11 widens three times although use_aux_hidden_state is false
    fp16 = reports["llama3.1-8b-instruct__specforge-llama3-8b-eagle3"]
    v2 = {r["site"]: r for r in fp16["sites"] if r["worker"] == "v2" and r["phase"] == "decode"}
    idle, graph = v2["EAGLEWorkerV2.forward_batch_generation"], v2["EAGLEDraftCudaGraphRunner.__init__"]
    # 0.5.11: the v2 idle input in the target's bf16, the graph buffer in the drafter's fp16
    assert idle["pristine"]["dtype"] == "torch.bfloat16" and graph["pristine"]["dtype"] == "torch.float16"
    # now the drafter is built in the target's dtype, and both follow it
    assert fp16["draft"]["dtype"] == "torch.float16" and fp16["draft_built_dtype"] == "torch.bfloat16"
    assert idle["dtype"] == graph["dtype"] == "torch.bfloat16"


def test_disagreement_table_in_docs_is_current(pristine):
    from sglang_eagle_sizing.report.disagreements import table

    committed = (REPO / "docs" / "disagreements.md").read_text()
    assert table(DATA, SglangTree.locate(pristine)) == committed, (
        "docs/disagreements.md is stale: regenerate it with "
        "`sglang-eagle-sizing report --disagreements test/data > docs/disagreements.md`"
    )


def _target_capture(srt: Path, draft_model_config, eagle_info, target_model_config):
    """Run the EAGLE-3 branch of the tree's own ``ModelRunner.__init__`` that reads the
    drafter's eagle_config; return what the target then captures."""
    import ast
    from types import SimpleNamespace

    module = ast.parse((srt / "model_executor" / "model_runner.py").read_text())
    cls = next(n for n in module.body if isinstance(n, ast.ClassDef) and n.name == "ModelRunner")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    branch = next(
        n for n in ast.walk(init)
        if isinstance(n, ast.If) and "is_eagle3()" in ast.unparse(n.test) and "is_draft_worker" in ast.unparse(n.test)
    )
    body = [
        s for s in branch.body
        if not isinstance(s, ast.ImportFrom)  # the patched tree's names come from below
        and not (isinstance(s, ast.Assign) and ast.unparse(s.targets[0]) == "draft_model_config")
    ]
    runner = SimpleNamespace(
        spec_algorithm=eagle_info.SpeculativeAlgorithm.EAGLE3, model_config=target_model_config
    )
    scope = {"self": runner, "draft_model_config": draft_model_config}
    from sglang_eagle_sizing.report.evaluate import load_spec_info

    # the parser is spec_info's (imported at the top of model_runner.py), the capture check
    # eagle_info's
    for module in (load_spec_info(srt), eagle_info):
        scope.update({n: getattr(module, n) for n in dir(module) if n.startswith(("get_eagle", "parse_eagle"))})
    exec(compile(ast.Module(body=body, type_ignores=[]), "model_runner.py", "exec"), scope)
    return runner.eagle_use_aux_hidden_state, runner.eagle_aux_hidden_state_layer_ids


EAGLE3_PAIRS = sorted(
    name for name in PAIRS
    if any("Eagle3" in a for a in config_json(DATA / name / "draft").get("architectures", []))
)


#: a drafter that declares its aux layer ids at the top level (see its SOURCE.md)
TOP_LEVEL_IDS = "qwen3-30b-a3b__specforge-moe-draft-eagle3-toplevel-ids"


@pytest.mark.parametrize("name", sorted(set(EAGLE3_PAIRS) - {TOP_LEVEL_IDS, FOUR_IDS}))
def test_the_target_captures_what_it_did_for_every_shared_eagle3_drafter(trees, name):
    """The target ModelRunner now reads eagle_config through the workers' parser; for every
    real drafter it captures exactly what 0.5.11's own parsing made it capture."""
    from sglang_eagle_sizing.report.evaluate import load_eagle_info

    pair = load_pair(DATA / name / "draft", DATA / name / "target", trees.patched)
    eagle_info = load_eagle_info(trees.patched)
    old = _target_capture(trees.pristine, pair.draft, eagle_info, pair.target)
    if name == "gemma-3-27b-it__specforge-eagle3":
        # 0.5.11's Gemma-3 classes capture nothing (the release raises AttributeError after
        # the weights load): refused before any weights load
        with pytest.raises(ValueError, match="does not capture EAGLE-3 aux hidden states"):
            _target_capture(trees.patched, pair.draft, eagle_info, pair.target)
        return
    assert _target_capture(trees.patched, pair.draft, eagle_info, pair.target) == old


def test_the_target_captures_the_layers_a_drafter_declares_at_the_top_level(trees):
    """0.5.11 read the ids only from eagle_config: for this drafter the target captured its
    default layers. The patched target captures the hidden states the drafter names (ids at
    the top level are output_hidden_states indices: SGLang's layer id k - 1), the ones the
    parser (and so the workers' sizes) count."""
    from sglang_eagle_sizing.report.evaluate import load_eagle_info, load_spec_info

    declared = config_json(DATA / TOP_LEVEL_IDS / "draft")["eagle_aux_hidden_state_layer_ids"]
    assert "eagle_config" not in config_json(DATA / TOP_LEVEL_IDS / "draft")
    pair = load_pair(DATA / TOP_LEVEL_IDS / "draft", DATA / TOP_LEVEL_IDS / "target")
    eagle_info = load_eagle_info(trees.patched)
    assert _target_capture(trees.pristine, pair.draft, eagle_info, pair.target) == (True, None)
    layer_ids = [k - 1 for k in declared]
    assert _target_capture(trees.patched, pair.draft, eagle_info, pair.target) == (True, layer_ids)
    assert load_spec_info(trees.patched).get_eagle_num_aux_hidden_states(pair.draft.hf_config) == len(declared)
