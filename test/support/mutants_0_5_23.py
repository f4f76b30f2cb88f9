"""The mutants of SGLang 0.5.23's patched tree, each with the fork test file that must fail on
it: every rule the patch replaces put back, every check undone, every convention off by one.
A mutant edits the patched checkout in place (``apply(fork)``); ``git`` restores it."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

SRT = "python/sglang/srt/"
TESTS = "test/registered/unit/speculative/"
CAPTURE = SRT + "model_executor/model_runner_components/spec_aux_hidden_state.py"
PARSER = SRT + "speculative/eagle3_draft_config.py"
HOOK = SRT + "arg_groups/speculative_hook.py"
CONFIG = SRT + "utils/hf_transformers/config.py"
EAGLE3 = SRT + "models/llama_eagle3.py"
LLAMA = SRT + "models/llama.py"
DEEPSEEK = SRT + "models/deepseek_v2.py"
GPT_OSS = SRT + "models/gpt_oss.py"
GEMMA3 = SRT + "models/gemma3_causal.py"
#: a class's ``set_eagle3_layers_to_capture`` handing what its contract answers to its
#: ``set_eagle3_hidden_states_to_capture``; ``SHIFTED_AT_ENTRY`` puts the ids one later first
SETTER_HANDS_OVER = (
    r"(\n(\s*)self\.set_eagle3_hidden_states_to_capture\(\n"
    r"\s*self\.get_eagle3_layers_to_capture\(self\.config, layer_ids\)\n\s*\)\n)"
)
SHIFTED_AT_ENTRY = r"\n\2layer_ids = layer_ids and [i + 1 for i in layer_ids]\1"


@dataclass(frozen=True)
class Mutant:
    name: str
    #: the fork test file that must fail on it
    killed_by: str
    apply: Callable[[Path], None]


def _release(file: str) -> Callable[[Path], None]:
    """The release's own text of ``file`` (its rule put back), without the parser's import."""

    def put_back(fork: Path) -> None:
        text = subprocess.run(
            ["git", "show", f"HEAD~1:{file}"], cwd=fork, capture_output=True, text=True,
            check=True,
        ).stdout
        (fork / file).write_text(text)

    return put_back


def _edit(file: str, pattern: str, replacement: str) -> Callable[[Path], None]:
    def edit(fork: Path) -> None:
        text = (fork / file).read_text()
        new, count = re.subn(pattern, replacement, text)
        assert count == 1, (file, pattern, count)
        (fork / file).write_text(new)

    return edit


MUTANTS = (
    Mutant(
        "llama_eagle3 fc: 0.5.23's count (top-level ids ignored)",
        TESTS + "test_eagle3_aux_layer_count.py",
        _release(SRT + "models/llama_eagle3.py"),
    ),
    Mutant(
        "kimi_k25_eagle3 fc: 0.5.23's count (num_aux_hidden_states ignored)",
        TESTS + "test_eagle3_aux_layer_count.py",
        _release(SRT + "models/kimi_k25_eagle3.py"),
    ),
    Mutant(
        "capture: 0.5.23's reading (eagle_config ids only)",
        TESTS + "test_eagle3_top_level_layer_ids.py",
        _release(CAPTURE),
    ),
    Mutant(
        "draft check: not called by the server arguments",
        TESTS + "test_eagle3_draft_check.py",
        _edit(HOOK, r"\n    _handle_eagle3_draft_check\(server_args\)\n", "\n"),
    ),
    Mutant(
        "draft check: the target's capture not checked where it is resolved",
        TESTS + "test_eagle3_draft_check.py",
        _edit(CAPTURE, r"\n\s*check_eagle3_target_capture\(\n(\s*.*\n){3}\s*\)\n", "\n"),
    ),
    Mutant(
        "draft check: the server arguments resolve the target's model class",
        TESTS + "test_eagle3_draft_check.py",
        _edit(
            HOOK,
            r"\n    validate_eagle3_draft_config\(",
            "\n    from sglang.srt.model_loader.utils import get_model_architecture\n\n"
            "    get_model_architecture(model_config_of(server_args))\n"
            "    validate_eagle3_draft_config(",
        ),
    ),
    Mutant(
        "draft check: a layer the target class does not capture allowed",
        TESTS + "test_eagle3_draft_check.py",
        _edit(PARSER, r"if captured and \(min\(captured\) < 0 or max\(captured\) > last\):", "if False:"),
    ),
    Mutant(
        "draft check: GPT-OSS's last layer's output refused",
        TESTS + "test_eagle3_draft_check.py",
        _edit(PARSER, r'if getattr\(model_cls, "eagle3_captures_final_hidden_state", False\):', "if False:"),
    ),
    Mutant(
        "draft check: a target without EAGLE-3 capture passes",
        TESTS + "test_eagle3_draft_check.py",
        _edit(PARSER, r'if not hasattr\(model_cls, "set_eagle3_layers_to_capture"\):', "if False:"),
    ),
    Mutant(
        "draft check: a num_aux_hidden_states other than the captured layers allowed",
        TESTS + "test_eagle3_draft_check.py",
        _edit(PARSER, r"if draft_config\.num_aux_hidden_states != captured:", "if False:"),
    ),
    Mutant(
        "draft dtype: not decided (0.5.23's draft keeps its config's dtype)",
        TESTS + "test_eagle_draft_dtype.py",
        _edit(HOOK, r"\n    _handle_eagle_draft_dtype\(server_args\)\n", "\n"),
    ),
    Mutant(
        "draft dtype: STANDALONE takes the target's too",
        TESTS + "test_eagle_draft_dtype.py",
        _edit(
            HOOK,
            r'"auto" or cfg.speculative_algorithm not in \("EAGLE", "EAGLE3"\)',
            '"auto" or cfg.speculative_algorithm not in ("EAGLE", "EAGLE3", "STANDALONE")',
        ),
    ),
    Mutant(
        "contract +1 (Llama): ids shifted by one at the entry of its setter",
        TESTS + "test_eagle3_capture_contract.py",
        _edit(LLAMA, SETTER_HANDS_OVER, SHIFTED_AT_ENTRY),
    ),
    Mutant(
        "contract +1 (Llama): indices shifted by one where they are captured",
        TESTS + "test_eagle3_capture_contract.py",
        _edit(LLAMA, r"= list\(hidden_state_ids\)", "= [i + 1 for i in hidden_state_ids]"),
    ),
    Mutant(
        "contract +1 (Llama): the declared rule changed",
        TESTS + "test_eagle3_capture_contract.py",
        _edit(LLAMA, r"return \[val \+ 1 for val in layer_ids\]", "return list(layer_ids)"),
    ),
    Mutant(
        "contract first-id-1 (DeepSeek-V3): ids shifted by one at the entry of its setter",
        TESTS + "test_eagle3_capture_contract_own_rules.py",
        _edit(DEEPSEEK, SETTER_HANDS_OVER, SHIFTED_AT_ENTRY),
    ),
    Mutant(
        "contract first-id-1 (DeepSeek-V3): the declared rule +1 always",
        TESTS + "test_eagle3_capture_contract_own_rules.py",
        _edit(DEEPSEEK, r"if layer_ids and layer_ids\[0\] == 1:", "if True:"),
    ),
    Mutant(
        "contract ids-ending-at-L (GPT-OSS): ids shifted by one at the entry of its setter",
        TESTS + "test_eagle3_capture_contract_own_rules.py",
        _edit(GPT_OSS, SETTER_HANDS_OVER, SHIFTED_AT_ENTRY),
    ),
    Mutant(
        "contract ids-ending-at-L (GPT-OSS): the declared rule +1 always",
        TESTS + "test_eagle3_capture_contract_own_rules.py",
        _edit(GPT_OSS, r"if layer_ids and max\(layer_ids\) == num_layers:", "if False:"),
    ),
    Mutant(
        "contract per-layer flags (Qwen3-MoE): indices shifted by one where handed on",
        TESTS + "test_eagle3_capture_contract_handed_on.py",
        _edit(
            SRT + "models/qwen3_moe.py",
            r"self\.model\.set_eagle3_layers_to_capture\(hidden_state_ids\)",
            "self.model.set_eagle3_layers_to_capture([i + 1 for i in hidden_state_ids])",
        ),
    ),
    Mutant(
        "contract delegation (Kimi-K2.5): declared apart from its language model",
        TESTS + "test_eagle3_capture_contract_own_rules.py",
        _edit(SRT + "models/kimi_k25.py", r"hf_config\.text_config, layer_ids\n", "hf_config.text_config, layer_ids and [i + 1 for i in layer_ids]\n"),
    ),
    Mutant(
        "contract final boundary (Gemma-3): not said",
        TESTS + "test_eagle3_capture_contract_own_rules.py",
        _edit(SRT + "models/gemma3_causal.py", r"eagle3_captures_final_hidden_state = True", "eagle3_captures_final_hidden_state = False"),
    ),
    Mutant(
        "top-level ids: 0.5.23's reading (eagle_config ids only)",
        TESTS + "test_eagle3_top_level_layer_ids.py",
        _release(CAPTURE),
    ),
    Mutant(
        "top-level ids: handed to the class's rule as layer ids (off by one)",
        TESTS + "test_eagle3_top_level_layer_ids.py",
        _edit(
            SRT + "model_executor/model_runner_components/attention_backend_setup.py",
            r"model\.set_eagle3_hidden_states_to_capture\(eagle_aux_hidden_state_indices\)",
            "model.set_eagle3_layers_to_capture(eagle_aux_hidden_state_indices)",
        ),
    ),
    Mutant(
        "speculators format: not read (0.5.23's AutoConfig alone)",
        TESTS + "test_eagle3_speculators_layer_ids.py",
        _edit(CONFIG, r"config = _try_load_speculators_eagle3_config\(model, revision, \*\*kwargs\)", "config = None"),
    ),
    Mutant(
        "speculators format: a config with a model_type read as speculators",
        TESTS + "test_eagle3_speculators_config.py",
        _edit(CONFIG, r'config_dict\.get\("model_type"\) is not None\s+or ', ""),
    ),
    Mutant(
        "speculators format: speculators_model_type unread",
        TESTS + "test_eagle3_speculators_config.py",
        _edit(CONFIG, r'if drafter != "eagle3":', "if False:"),
    ),
    Mutant(
        "speculators format: an absent norm_before_residual read as false",
        TESTS + "test_eagle3_speculators_config.py",
        _edit(CONFIG, r'config_dict\.get\("norm_before_residual", True\)', 'config_dict.get("norm_before_residual", False)'),
    ),
    Mutant(
        "speculators format: a qwen3 layer loaded as a llama one",
        TESTS + "test_eagle3_speculators_config.py",
        _edit(CONFIG, r'if model_type in \(None, "qwen3"\):', "if False:"),
    ),
    Mutant(
        "speculators format: the ids converted as SGLang counts layers (off by one)",
        TESTS + "test_eagle3_speculators_layer_ids.py",
        _edit(CONFIG, r"config\.eagle_aux_hidden_state_layer_ids = layer_ids\n", "config.eagle_aux_hidden_state_layer_ids = [i - 1 for i in layer_ids]\n"),
    ),
    Mutant(
        "speculators format: the indices read as SGLang's layer ids (one less)",
        TESTS + "test_eagle3_speculators_layer_ids.py",
        _edit(
            PARSER,
            r"aux_hidden_state_indices=None if indices is None else list\(indices\)",
            "aux_hidden_state_indices=None if indices is None else [i - 1 for i in indices]",
        ),
    ),
    Mutant(
        "gemma3 capture: the branch alone (0.5.23's gemma3_causal.py)",
        TESTS + "test_gemma3_aux_hidden_states.py",
        _release(GEMMA3),
    ),
    Mutant(
        "gemma3 capture: the last layer's output taken after the final norm",
        TESTS + "test_gemma3_aux_hidden_states.py",
        _edit(
            GEMMA3,
            r"        if num_layers in self\.layers_to_capture:\n"
            r"            aux_hidden_states\.append\(\n.*\n            \)\n\n"
            r"        hidden_states, _ = self\.norm\(hidden_states, residual\)\n",
            "        hidden_states, _ = self.norm(hidden_states, residual)\n"
            "        if num_layers in self.layers_to_capture:\n"
            "            aux_hidden_states.append(hidden_states)\n",
        ),
    ),
    Mutant(
        "norm_before_residual: not read (0.5.23's raw residual)",
        TESTS + "test_eagle3_norm_before_residual.py",
        _edit(EAGLE3, r"self\.norm_before_residual = bool\(", "self.norm_before_residual = False and bool("),
    ),
    Mutant(
        "norm_before_residual: read from eagle_config only",
        TESTS + "test_eagle3_norm_before_residual.py",
        _edit(EAGLE3, r'getattr\(config, "norm_before_residual", False\)', "False"),
    ),
)

#: STANDALONE's draft proposal across PD disaggregation, and the idle verify input's KV layout
PREFILL = SRT + "disaggregation/prefill.py"
METADATA = SRT + "disaggregation/utils.py"
SPEC_INFO = SRT + "speculative/spec_info.py"
EAGLE_DISAGG = SRT + "speculative/eagle_disaggregation.py"
PD_TEST = "test/registered/unit/speculative/test_standalone_disagg_draft_input.py"
IDLE_VERIFY_TEST = "test/registered/unit/speculative/test_idle_verify_input.py"
MUTANTS += (
    Mutant(
        "standalone disagg: the prefill server hands over EAGLE's proposal only",
        PD_TEST,
        _edit(PREFILL, r"self\.spec_algorithm\.need_topk\(\) and", "self.spec_algorithm.is_eagle() and"),
    ),
    Mutant(
        "standalone disagg: the metadata buffers copy a proposal only with hidden states",
        PD_TEST,
        _edit(METADATA, r"if req\.output_topk_p is not None:", "if req.hidden_states_tensor is not None:"),
    ),
    Mutant(
        "standalone disagg: no first draft input for STANDALONE (0.5.23's build_disagg_draft_input)",
        PD_TEST,
        _edit(SPEC_INFO, r"if self\.need_topk\(\):\n            from sglang\.srt\.speculative\.eagle_disaggregation",
              "if self.is_eagle():\n            from sglang.srt.speculative.eagle_disaggregation"),
    ),
    Mutant(
        "standalone disagg: hidden states stacked for every algorithm",
        PD_TEST,
        _edit(EAGLE_DISAGG, r"\n    if with_hidden_states:\n", "\n    if True:\n"),
    ),
    Mutant(
        "idle verify input: no kv_indptr / kv_indices (0.5.23's EagleVerifyInput)",
        IDLE_VERIFY_TEST,
        _release(SRT + "speculative/eagle_info.py"),
    ),
)
