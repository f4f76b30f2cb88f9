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
TESTS = "test/registered/unit/speculative/eagle3_draft/"
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
        "extend width: 0.5.23's count (num_aux_hidden_states first)",
        TESTS + "test_aux_layer_count.py",
        _release(SRT + "speculative/eagle_utils.py"),
    ),
    Mutant(
        "llama_eagle3 fc: 0.5.23's count (top-level ids ignored)",
        TESTS + "test_aux_layer_count.py",
        _release(SRT + "models/llama_eagle3.py"),
    ),
    Mutant(
        "kimi_k25_eagle3 fc: 0.5.23's count (num_aux_hidden_states ignored)",
        TESTS + "test_aux_layer_count.py",
        _release(SRT + "models/kimi_k25_eagle3.py"),
    ),
    Mutant(
        "capture: 0.5.23's reading (eagle_config ids only)",
        TESTS + "test_aux_layer_count.py",
        _release(CAPTURE),
    ),
    Mutant(
        "draft check: not called",
        TESTS + "test_draft_check.py",
        _edit(CAPTURE, r"        validate_eagle3_draft_config\(\n(?:.*\n){3}        \)\n", ""),
    ),
    Mutant(
        "draft check: the target's last layer allowed",
        TESTS + "test_draft_check.py",
        _edit(PARSER, r"max\(layer_ids\) > num_layers - 2", "max(layer_ids) > num_layers - 1"),
    ),
    Mutant(
        "draft dtype: not decided (0.5.23's draft keeps its config's dtype)",
        TESTS + "test_draft_dtype.py",
        _edit(HOOK, r"\n    _handle_eagle_draft_dtype\(server_args\)\n", "\n"),
    ),
    Mutant(
        "draft dtype: STANDALONE takes the target's too",
        TESTS + "test_draft_dtype.py",
        _edit(
            HOOK,
            r'"auto" or cfg.speculative_algorithm not in \("EAGLE", "EAGLE3"\)',
            '"auto" or cfg.speculative_algorithm not in ("EAGLE", "EAGLE3", "STANDALONE")',
        ),
    ),
    Mutant(
        "speculators format: not read (0.5.23's AutoConfig alone)",
        TESTS + "test_speculators_format.py",
        _edit(CONFIG, r"config = auto_config_or_speculators_eagle3\(", "config = AutoConfig.from_pretrained("),
    ),
    Mutant(
        "speculators format: layer ids taken as SGLang's (off by one)",
        TESTS + "test_speculators_format.py",
        _edit(CONFIG, r"\[i - 1 for i in layer_ids\]", "list(layer_ids)"),
    ),
    Mutant(
        "norm_before_residual: not read (0.5.23's raw residual)",
        TESTS + "test_norm_variants.py",
        _edit(EAGLE3, r"self\.norm_before_residual = bool\(", "self.norm_before_residual = False and bool("),
    ),
    Mutant(
        "norm_before_residual: read from eagle_config only",
        TESTS + "test_norm_variants.py",
        _edit(EAGLE3, r'getattr\(config, "norm_before_residual", False\)', "False"),
    ),
    Mutant(
        "norm_before_fc: input_norm not applied",
        TESTS + "test_norm_variants.py",
        _edit(EAGLE3, r"hidden_states = self\.input_norm\(hidden_states\)", "pass"),
    ),
    Mutant(
        "fc_norm: the per-layer norms not applied",
        TESTS + "test_norm_variants.py",
        _edit(EAGLE3, r"\[norm\(chunk\) for norm, chunk in", "[chunk for norm, chunk in"),
    ),
    Mutant(
        "norm_output: the next step reads the hidden states before the norm",
        TESTS + "test_norm_variants.py",
        _edit(EAGLE3, r"aux = hidden_states_to_logits if self\.norm_output else", "aux ="),
    ),
)
