"""The capture-rules probe (scripts/capture_rules_table.py) on a sample of released classes:
each class's rule, read by calling its own ``set_eagle3_layers_to_capture`` on a stand-in, is
the one its code has (DeepSeek adds 1 only when the first id is 1, GPT-OSS keeps ids ending at
L, Qwen3-MoE delegates to its inner model, Llama adds 1)."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
L = 24


def _script():
    spec = importlib.util.spec_from_file_location(
        "capture_rules_table", REPO / "scripts/capture_rules_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    script = _script()
    cases = script.write_cases(tmp_path_factory.mktemp("cases"), L)
    samples = {
        "0.5.23": ["llama", "deepseek_v2", "gpt_oss", "qwen3_moe"],
        "0.5.11": ["llama"],
    }
    runs = {}
    with ThreadPoolExecutor(2) as pool:
        for family, only in samples.items():
            venv = script.ENVIRONMENTS[family]
            if not (venv / "bin/python").exists():
                pytest.fail(f"{venv}: missing; bash scripts/setup.sh makes it")
            site = next((venv / "lib").glob("python3*/site-packages"))
            runs[family] = pool.submit(
                script.run_probe, venv / "bin/python", site, cases, only
            )
        results = {family: run.result() for family, run in runs.items()}
    rows = {
        (family, row["class"]): row
        for family, result in results.items()
        for row in result["rows"]
    }
    return script, results, rows


def _captured(row, case):
    return row["cells"][case]["captured"]


def test_model_files_are_found_by_parsing(probed):
    _, results, _ = probed
    assert (
        len(results["0.5.23"]["files"]) == 29 and len(results["0.5.11"]["files"]) == 19
    )
    assert {"deepseek_v2", "gpt_oss", "qwen3_moe", "gemma3_mm"} <= set(
        results["0.5.23"]["files"]
    )


def test_deepseek_adds_one_only_when_the_first_id_is_one(probed):
    script, _, rows = probed
    for name in ("DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"):
        row = rows[("0.5.23", name)]
        assert _captured(row, "first1") == [2, L // 2 + 1, L - 3]
        assert _captured(row, "first2") == [2, L // 2, L - 4]
        assert script.rule_of(row, L) == "+1 only if the first id is 1, else as given"
        assert row["cells"]["first1"]["on"] == "self.model"


def test_gpt_oss_keeps_ids_ending_at_the_final_boundary(probed):
    script, _, rows = probed
    row = rows[("0.5.23", "GptOssForCausalLM")]
    assert _captured(row, "last_l") == [1, L // 2, L]
    assert _captured(row, "last_l_minus_1") == [2, L // 2 + 1, L]
    assert (
        script.rule_of(row, L)
        == "as given if max == L, else +1; captures the final boundary"
    )
    assert row["final_boundary"].startswith(
        "yes (GptOssModel.forward tests `self.end_layer in"
    )


def test_qwen3_moe_delegates_to_its_inner_model_which_flags_layers(probed):
    script, _, rows = probed
    row = rows[("0.5.23", "Qwen3MoeForCausalLM")]
    cell = row["cells"]["first1"]
    assert cell["holder_class"] == "Qwen3MoeModel" and cell["on"] == "self.model"
    assert cell["captured"] == cell["flagged"] == [2, L // 2 + 1, L - 3]
    # id L-1 + 1 flags layers[L], which the inner model does not have
    assert row["cells"]["last_l_minus_1"]["raises"].startswith("IndexError")
    assert script.rule_of(row, L).startswith(
        "+1 always (last id L-1: raises IndexError"
    )
    inner = rows[("0.5.23", "Qwen3MoeModel")]
    assert not inner["registered"] and _captured(inner, "first2") == [2, L // 2, L - 4]


@pytest.mark.parametrize("family", ["0.5.23", "0.5.11"])
def test_llama_adds_one_to_every_id(probed, family):
    script, _, rows = probed
    row = rows[(family, "LlamaForCausalLM")]
    assert _captured(row, "none") == [2, L // 2, L - 3]
    assert _captured(row, "first2") == [3, L // 2 + 1, L - 3]
    assert script.rule_of(row, L) == "+1 always"
    assert row["final_boundary"].startswith("no (LlamaModel.forward")
