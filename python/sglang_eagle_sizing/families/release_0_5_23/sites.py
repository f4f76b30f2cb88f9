"""Where SGLang 0.5.23 decides how many target layers an EAGLE-3 drafter concatenates.

Upstream routes every idle input and CUDA-graph buffer through its helpers in
``speculative/eagle_utils.py``; the number of aux hidden states is still read by four rules
of their own (``docs/release-0.5.23.md``, section 2). These are the readers the patch makes
ask one parser; a reader the rules cannot find is reported, never skipped. Paths are relative
to ``sglang/srt``.
"""

from __future__ import annotations

from pathlib import Path

from sglang_eagle_sizing.concerns import enabled
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23.inserted import (
    EAGLE3_DRAFT_CHECK,
    EAGLE3_DRAFT_CONFIG,
    EAGLE3_DRAFT_CONFIG_FILE,
    HIDDEN_STATE_INDICES_CAPTURED,
    HIDDEN_STATE_INDICES_CHECK_CAPTURED,
    HIDDEN_STATE_INDICES_CHECK_SIGNATURE,
    HIDDEN_STATE_INDICES_CHECKED,
    HIDDEN_STATE_INDICES_FIELD,
    HIDDEN_STATE_INDICES_PARSED,
    HIDDEN_STATE_INDICES_RETURNED,
)
from sglang_eagle_sizing.texts import rewritten

#: ``num_aux = getattr(<config>, "num_aux_hidden_states", None)`` and the ``if num_aux is
#: None:`` block after it: the extend helper (the buffers' width) and the drafter's ``fc``.
AUX_COUNT_BLOCKS = (
    ("speculative/eagle_utils.py", "get_draft_input_from_target_hidden_dim"),
    ("models/llama_eagle3.py", "LlamaModel.__init__"),
)
#: A function returning the count, read from the layer ids alone (Kimi-K2.5's drafter).
AUX_COUNT_FUNCTIONS = (("models/kimi_k25_eagle3.py", "_get_eagle_aux_layer_count"),)
#: What the target captures: ``try: ... eagle_config["eagle_aux_hidden_state_layer_ids"]``.
TARGET_CAPTURE = (
    "model_executor/model_runner_components/spec_aux_hidden_state.py",
    "_resolve_eagle_aux_hidden_state",
)
#: The struct the resolution fills (its ``eagle_aux_hidden_state_layer_ids`` field), the
#: function that hands it to the model and the model runner's call of that function: the
#: path of hidden-state indices beside the layer ids.
SPEC_AUX_CONFIG = (TARGET_CAPTURE[0], "SpecAuxHiddenStateConfig")
CONFIGURE_CAPTURE = (
    "model_executor/model_runner_components/attention_backend_setup.py",
    "configure_aux_hidden_state_capture",
)
CONFIGURE_CAPTURE_CALL = (
    "model_executor/model_runner.py",
    "ModelRunner.init_attention_backends",
)

#: The model files whose classes capture EAGLE-3 aux hidden states
#: (``set_eagle3_layers_to_capture(self, layer_ids)``): each such class declares what it
#: captures (``get_eagle3_layers_to_capture``), in three patches of nine files by rule:
#: the classes that add 1 and hold ``layers_to_capture`` on their model; those that add 1 and
#: hand the indices on (an inner model's method, flags on the layers, a multimodal model);
#: those with rules of their own, the last layer's output or a language model to ask.
#: ``models/mindspore.py`` is none of them: its ``MindSporeForCausalLM`` hands the ids to a
#: model class chosen at run time, so it stays undeclared and captures as the release does.
CAPTURE_CONTRACT_GROUPS = {
    concerns.CAPTURE_CONTRACT: (
        "apertus",
        "exaone_moe",
        "glm4_moe",
        "glm5_next",
        "llama",
        "longcat_flash",
        "minimax_m2",
        "qwen2",
        "qwen3",
    ),
    concerns.CAPTURE_CONTRACT_HANDED_ON: (
        "bailing_moe",
        "minimax_m3",
        "minimax_m3_vl",
        "qwen2_5_vl",
        "qwen2_moe",
        "qwen3_5_text",
        "qwen3_moe",
        "qwen3_next",
        "qwen3_vl",
    ),
    concerns.CAPTURE_CONTRACT_OWN_RULES: (
        "deepseek_v2",
        "gemma3_causal",
        "gemma3_mm",
        "gemma4_causal",
        "gemma4_mm",
        "glm4_moe_lite",
        "gpt_oss",
        "kimi_k25",
        "mllama4",
    ),
}
CAPTURE_CONTRACT_MODELS = tuple(
    sorted(f"models/{name}.py" for names in CAPTURE_CONTRACT_GROUPS.values() for name in names)
)
#: Where Gemma-3 captures EAGLE-3 aux hidden states: its model's forward, whose decoder
#: layers return their branch and the residual stream apart.
GEMMA3_AUX = ("models/gemma3_causal.py", "Gemma3TextModel.forward")
#: The classes whose model's forward captures the last layer's output when
#: ``layers_to_capture`` holds the layer count (``self.end_layer in self.layers_to_capture``,
#: ``num_layers in self.layers_to_capture`` after the layer loop of the model they capture
#: in: Gemma3TextModel, Gemma4TextModel, GptOssModel, MiniMaxM3Model).
#: The models whose forward captures it (``self.end_layer in self.layers_to_capture``, or
#: ``num_layers in ...`` after the layer loop), which the rule checks still do.
FINAL_HIDDEN_STATE_HOLDERS = (
    ("models/gemma3_causal.py", "Gemma3TextModel"),
    ("models/gemma4_causal.py", "Gemma4TextModel"),
    ("models/gpt_oss.py", "GptOssModel"),
    ("models/minimax_m3.py", "MiniMaxM3Model"),
)
FINAL_HIDDEN_STATE_CLASSES = (
    ("models/gemma3_causal.py", "Gemma3ForCausalLM"),
    ("models/gemma3_mm.py", "Gemma3ForConditionalGeneration"),
    ("models/gemma4_causal.py", "Gemma4ForCausalLM"),
    ("models/gemma4_mm.py", "Gemma4ForConditionalGeneration"),
    ("models/gpt_oss.py", "GptOssForCausalLM"),
    ("models/minimax_m3.py", "MiniMaxM3SparseForCausalLM"),
    ("models/minimax_m3_vl.py", "MiniMaxM3SparseForConditionalGeneration"),
)

#: Where the server arguments check the drafter against its target and decide the draft
#: model's dtype: ``_handle_eagle_family``, after its call of ``_handle_iquest_q1_mtp_draft``
#: (the other per-drafter decision).
DRAFT_DTYPE = ("arg_groups/speculative_hook.py", "_handle_eagle_family")
DRAFT_DTYPE_ANCHOR = "_handle_iquest_q1_mtp_draft"
#: The drafter is checked against its target after the algorithm is
#: (``_check_oot_speculative_algorithm``, ``_handle_eagle_family``'s first call).
DRAFT_CHECK_ANCHOR = "_check_oot_speculative_algorithm"

#: Where a model's config is read: ``config = AutoConfig.from_pretrained(...)`` in the HF
#: parser, after upstream's own ``_try_load_*`` readers of configs it cannot read.
CONFIG_READ = ("utils/hf_transformers/config.py", "HfModelConfigParser.parse")

#: The EAGLE-3 drafter's decoder layer: ``__init__`` reads ``norm_before_residual`` after
#: ``self.hidden_norm = ...``; ``forward``'s input-layer branch (``if self.is_input_layer:``,
#: ``residual = hidden_states`` then ``hidden_states = self.hidden_norm(hidden_states)``)
#: takes the residual it chooses. The other three norm flags of the speculators format
#: (``norm_before_fc``, ``fc_norm``, ``norm_output``) 0.5.23's ``LlamaModel`` reads itself.
DRAFTER_LAYER = ("models/llama_eagle3.py", "LlamaDecoderLayer")

#: STANDALONE under PD disaggregation: where the prefill server hands each request its draft
#: proposal (``output_topk_p`` / ``output_topk_index``, only ``is_eagle()`` in the release),
#: where ``MetadataBuffers`` copies it (only with hidden states), where the decode server builds
#: its first draft input from it (``None`` for STANDALONE) and where that input stacks hidden
#: states (which STANDALONE does not make).
DISAGG_PREFILL_DRAFT = (
    "disaggregation/prefill.py",
    "SchedulerDisaggregationPrefillMixin.process_batch_result_disagg_prefill",
)
DISAGG_METADATA_DRAFT = ("disaggregation/utils.py", "MetadataBuffers.set_buf")
DISAGG_DRAFT_INPUT = ("speculative/spec_info.py", "SpeculativeAlgorithm.build_disagg_draft_input")
DISAGG_DRAFT_HIDDEN = ("speculative/eagle_disaggregation.py", "build_eagle_disagg_draft_input")

#: The verify input an idle rank builds (``EagleVerifyInput.create_idle_input``): a class
#: without the ``kv_indptr`` / ``kv_indices`` the attention backends read of an idle batch.
IDLE_VERIFY_INPUT = ("speculative/eagle_info.py", "EagleVerifyInput")

#: No sizing site of 0.5.23 is rewritten (they all call upstream's helpers).
SITES: tuple = ()

#: Files a 0.5.23 tree must hold, and the only ones the rules read.
SITE_FILES: tuple[str, ...] = tuple(
    sorted(
        {f for f, _ in AUX_COUNT_BLOCKS}
        | {f for f, _ in AUX_COUNT_FUNCTIONS}
        | {TARGET_CAPTURE[0], DRAFT_DTYPE[0], CONFIG_READ[0], DRAFTER_LAYER[0]}
        | {CONFIGURE_CAPTURE[0], CONFIGURE_CAPTURE_CALL[0]}
        | set(CAPTURE_CONTRACT_MODELS)
        | {
            f
            for f, _ in (
                DISAGG_PREFILL_DRAFT,
                DISAGG_METADATA_DRAFT,
                DISAGG_DRAFT_INPUT,
                DISAGG_DRAFT_HIDDEN,
                IDLE_VERIFY_INPUT,
            )
        }
    )
)

#: Modules the patch adds: ``{file relative to srt/: its parts}``, each part ``(the concern
#: that writes it, its text)``, appended, or ``(concern, (old, new))``, a text of an earlier
#: part's that the concern rewrites; the first part's concern adds the module.
NEW_MODULES = {
    EAGLE3_DRAFT_CONFIG_FILE: (
        (concerns.AUX_COUNT, EAGLE3_DRAFT_CONFIG),
        (concerns.DRAFT_CHECK, EAGLE3_DRAFT_CHECK),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_FIELD),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_PARSED),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_RETURNED),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_CHECKED),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_CHECK_SIGNATURE),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_CHECK_CAPTURED),
        (concerns.TOP_LEVEL_LAYER_IDS, HIDDEN_STATE_INDICES_CAPTURED),
    )
}

#: The fork's tests, by the concern whose patch adds them (paths from the checkout root):
#: self-contained files beside upstream's own speculative unit tests.
UNIT_TESTS = "test/registered/unit/speculative/"
TEST_CONCERNS = {
    UNIT_TESTS + "test_eagle3_aux_layer_count.py": concerns.AUX_COUNT,
    UNIT_TESTS + "test_eagle3_top_level_layer_ids.py": concerns.TOP_LEVEL_LAYER_IDS,
    UNIT_TESTS + "test_eagle3_draft_check.py": concerns.DRAFT_CHECK,
    UNIT_TESTS + "test_eagle3_capture_contract.py": concerns.CAPTURE_CONTRACT,
    UNIT_TESTS
    + "test_eagle3_capture_contract_handed_on.py": concerns.CAPTURE_CONTRACT_HANDED_ON,
    UNIT_TESTS
    + "test_eagle3_capture_contract_own_rules.py": concerns.CAPTURE_CONTRACT_OWN_RULES,
    UNIT_TESTS + "test_eagle_draft_dtype.py": concerns.DRAFT_DTYPE,
    UNIT_TESTS + "test_eagle3_speculators_config.py": concerns.SPECULATORS_EAGLE3,
    UNIT_TESTS + "test_eagle3_speculators_layer_ids.py": concerns.SPECULATORS_EAGLE3,
    UNIT_TESTS + "test_eagle3_norm_before_residual.py": concerns.SPECULATORS_NORMS,
    UNIT_TESTS + "test_standalone_disagg_draft_input.py": concerns.STANDALONE_DISAGG,
    UNIT_TESTS + "test_idle_verify_input.py": concerns.IDLE_VERIFY_KV,
    UNIT_TESTS + "test_gemma3_aux_hidden_states.py": concerns.GEMMA3_AUX_RESIDUAL,
}


def _module_text(parts) -> str:
    text = ""
    for concern, part in parts:
        if not enabled(concern):
            continue
        text = text + part if isinstance(part, str) else rewritten(text, part)
    return text


def new_modules() -> dict[str, str]:
    """The modules the enabled concerns add."""
    return {
        file: _module_text(parts)
        for file, parts in NEW_MODULES.items()
        if enabled(parts[0][0])
    }


def carries_patch(srt: Path) -> bool:
    """Whether the tree holds a module the patch adds."""
    return any((srt / file).is_file() for file in NEW_MODULES)


def test_files(files: dict[str, bytes]) -> dict[str, bytes]:
    """Of the fork's tests, those the enabled concerns add (a file no concern owns: none)."""
    return {
        key: data
        for key, data in files.items()
        if key in TEST_CONCERNS and enabled(TEST_CONCERNS[key])
    }
