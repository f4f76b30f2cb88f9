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
        "draft check: not called",
        TESTS + "test_eagle3_draft_check.py",
        _edit(CAPTURE, r"        validate_eagle3_draft_config\(\n(?:.*\n){3}        \)\n", ""),
    ),
    Mutant(
        "draft check: an id past the target's layers allowed",
        TESTS + "test_eagle3_draft_check.py",
        _edit(PARSER, r"max\(layer_ids\) > num_layers:", "max(layer_ids) > num_layers + 1:"),
    ),
    Mutant(
        "draft check: a num_aux_hidden_states other than the captured layers allowed",
        TESTS + "test_eagle3_draft_check.py",
        _edit(PARSER, r"if draft_config\.num_aux_hidden_states != captured:", "if False:"),
    ),
    Mutant(
        "draft check: layer ids declared twice may differ",
        TESTS + "test_eagle3_draft_check.py",
        _edit(PARSER, r"if list\(nested_ids\) != list\(top_level_ids\):", "if False:"),
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
        "capture: the class's method alone (0.5.23's configure_aux_hidden_state_capture)",
        TESTS + "test_eagle3_capture_rule.py",
        _release(SRT + "model_executor/model_runner_components/attention_backend_setup.py"),
    ),
    Mutant(
        "capture: GPT-OSS's last layer's output refused",
        TESTS + "test_eagle3_capture_rule.py",
        _edit(PARSER, r'if getattr\(holder, "captures_final_hidden_state", False\):', "if False:"),
    ),
    Mutant(
        "capture: a delegating target's capture not reached",
        TESTS + "test_eagle3_capture_rule.py",
        _edit(PARSER, r"for m in model\.modules\(\)", "for m in model.children()"),
    ),
    Mutant(
        "speculators format: not read (0.5.23's AutoConfig alone)",
        TESTS + "test_eagle3_speculators_format.py",
        _edit(CONFIG, r"config = _try_load_speculators_eagle3_config\(model, revision, \*\*kwargs\)", "config = None"),
    ),
    Mutant(
        "speculators format: layer ids taken as SGLang's (off by one)",
        TESTS + "test_eagle3_speculators_format.py",
        _edit(CONFIG, r"\[i - 1 for i in layer_ids\]", "list(layer_ids)"),
    ),
    Mutant(
        "speculators format: the ids given to DeepSeek's rule unchanged",
        TESTS + "test_eagle3_speculators_format.py",
        _edit(PARSER, r"if hidden_state_indices is not None:", "if False:"),
    ),
    Mutant(
        "speculators format: a refused id named as SGLang counts it",
        TESTS + "test_eagle3_speculators_format.py",
        _edit(CONFIG, r"config\.speculators_eagle_aux_hidden_state_layer_ids = layer_ids", "pass"),
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
