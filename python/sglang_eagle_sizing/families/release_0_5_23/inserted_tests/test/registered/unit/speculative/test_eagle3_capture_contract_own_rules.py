"""The classes with EAGLE-3 capture rules of their own (DeepSeek-V2/V3, GLM-4-MoE-Lite,
GPT-OSS), those that capture the last layer's output (Gemma-3, Gemma-4) and those that
ask their language model (Gemma-3/4 multimodal, Kimi-K2.5, Llama-4) capture, through the
model runner's call, what the release captures for layer ids, and through their
set_eagle3_hidden_states_to_capture exactly the hidden states they are handed."""

import importlib
import unittest
from types import SimpleNamespace

from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
    configure_aux_hidden_state_capture,
)
from sglang.srt.runtime_context import get_parallel
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=30, suite="base-a-test-cpu")

NUM_LAYERS = 8
LAST_RANK = SimpleNamespace(is_last_rank=True)
LAYER_IDS = (None, [1, 3, 5], [2, 3, 7], [1, 3, NUM_LAYERS])
# What each rule captures on the release for LAYER_IDS, as hidden-state indices
# (0: the embeddings, i: the output of layer i - 1).
# DeepSeek-V2/V3 take ids as given unless the first is 1 (#25454).
FIRST_ID_ONE_ADDS_ONE = [[2, 4, 5], [2, 4, 6], [2, 3, 7], [2, 4, 9]]
# GPT-OSS keeps ids ending at its layer count (#32334).
ENDING_AT_LAYER_COUNT_KEPT = [[2, 4, 5], [2, 4, 6], [3, 4, 8], [1, 3, 8]]
ADD_ONE = [[2, 4, 5], [2, 4, 6], [3, 4, 8], [2, 4, 9]]
# (file, class, its language model: a class of (file, name), "holder" for a plain
# holder of layers_to_capture, None: none; its rule; whether its forward captures the
# last layer's output)
CLASSES = (
    ("deepseek_v2", "DeepseekV2ForCausalLM", None, FIRST_ID_ONE_ADDS_ONE, False),
    ("deepseek_v2", "DeepseekV3ForCausalLM", None, FIRST_ID_ONE_ADDS_ONE, False),
    ("deepseek_v2", "DeepseekV32ForCausalLM", None, FIRST_ID_ONE_ADDS_ONE, False),
    ("glm4_moe", "GlmMoeDsaForCausalLM", None, FIRST_ID_ONE_ADDS_ONE, False),
    ("glm4_moe", "GlmMoeDsaForCausalLMNextN", None, FIRST_ID_ONE_ADDS_ONE, False),
    ("glm4_moe_lite", "Glm4MoeLiteForCausalLM", None, FIRST_ID_ONE_ADDS_ONE, False),
    ("gpt_oss", "GptOssForCausalLM", None, ENDING_AT_LAYER_COUNT_KEPT, True),
    ("gemma3_causal", "Gemma3ForCausalLM", None, ADD_ONE, True),
    ("gemma3_causal", "EmbeddingGemmaModel", None, ADD_ONE, True),
    ("gemma4_causal", "Gemma4ForCausalLM", None, ADD_ONE, True),
    (
        "gemma3_mm",
        "Gemma3ForConditionalGeneration",
        ("gemma3_causal", "Gemma3ForCausalLM"),
        ADD_ONE,
        True,
    ),
    ("gemma4_mm", "Gemma4ForConditionalGeneration", "holder", ADD_ONE, True),
    (
        "kimi_k25",
        "KimiK25ForConditionalGeneration",
        ("deepseek_v2", "DeepseekV3ForCausalLM"),
        FIRST_ID_ONE_ADDS_ONE,
        False,
    ),
    (
        "mllama4",
        "Llama4ForConditionalGeneration",
        ("llama4", "Llama4ForCausalLM"),
        ADD_ONE,
        False,
    ),
)


def _class(file, name):
    return getattr(importlib.import_module(f"sglang.srt.models.{file}"), name)


def _plain(cls):
    """A ``cls`` holding what its capture reads: config, pipeline stage and model."""
    config = SimpleNamespace(num_hidden_layers=NUM_LAYERS)
    config.text_config = config
    model = SimpleNamespace(layers_to_capture=[])
    model.layers = [SimpleNamespace() for _ in range(NUM_LAYERS)]
    target = cls.__new__(cls)
    target.__dict__.update(config=config, pp_group=LAST_RANK, model=model)
    return target


def target(cls, language_model):
    target = _plain(cls)
    if language_model == "holder":
        target.__dict__["language_model"] = SimpleNamespace(layers_to_capture=[])
    elif language_model is not None:
        target.__dict__["language_model"] = _plain(_class(*language_model))
    return target


def captured(target, layer_ids=None, hidden_state_ids=None):
    with get_parallel().override(pp_group=LAST_RANK):
        if hidden_state_ids is not None:
            target.set_eagle3_hidden_states_to_capture(hidden_state_ids)
        else:
            configure_aux_hidden_state_capture(
                model=target,
                eagle_use_aux_hidden_state=True,
                eagle_aux_hidden_state_layer_ids=layer_ids,
                dflash_use_aux_hidden_state=False,
                dflash_target_layer_ids=None,
                is_dspark=False,
            )
    holder = getattr(target, "language_model", None) or target
    holder = getattr(holder, "model", holder)
    return list(holder.layers_to_capture)


class TestOwnRulesCaptureContract(CustomTestCase):
    def test_layer_ids_capture_as_on_the_release(self):
        for file, name, language_model, released, _ in CLASSES:
            cls = _class(file, name)
            for layer_ids, hidden_states in zip(LAYER_IDS, released):
                with self.subTest(name, layer_ids=layer_ids):
                    self.assertEqual(
                        captured(target(cls, language_model), layer_ids),
                        hidden_states,
                    )
                    # what the check before load reads of the class
                    config = target(cls, None).config
                    self.assertEqual(
                        cls.get_eagle3_layers_to_capture(config, layer_ids),
                        hidden_states,
                    )

    def test_hidden_state_ids_are_captured_as_they_are(self):
        # DeepSeek-V3's rule gives hidden states [1, 30, 58] for no layer ids: a drafter
        # declaring them as indices is served from them.
        for file, name, language_model, _, _ in CLASSES:
            cls = _class(file, name)
            for hidden_state_ids in ([1, 3, 7], [0, 4, NUM_LAYERS]):
                with self.subTest(name, hidden_state_ids=hidden_state_ids):
                    self.assertEqual(
                        captured(
                            target(cls, language_model),
                            hidden_state_ids=hidden_state_ids,
                        ),
                        hidden_state_ids,
                    )

    def test_the_classes_that_capture_the_last_layers_output_say_so(self):
        for file, name, _, _, final in CLASSES:
            with self.subTest(name):
                self.assertEqual(
                    getattr(
                        _class(file, name), "eagle3_captures_final_hidden_state", False
                    ),
                    final,
                )


if __name__ == "__main__":
    unittest.main()
