"""The classes with EAGLE-3 capture rules of their own (DeepSeek-V3, GPT-OSS), the last
layer's output (Gemma-3) or a language model to ask (Kimi-K2.5) say, from their config
alone, which hidden states they capture for a drafter's layer ids, and capture them."""

import unittest
from types import SimpleNamespace

from torch import nn

from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
    configure_aux_hidden_state_capture,
)
from sglang.srt.models.deepseek_v2 import DeepseekV2Model, DeepseekV3ForCausalLM
from sglang.srt.models.gemma3_causal import Gemma3ForCausalLM, Gemma3TextModel
from sglang.srt.models.gpt_oss import GptOssForCausalLM, GptOssModel
from sglang.srt.models.kimi_k25 import KimiK25ForConditionalGeneration
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=20, suite="base-a-test-cpu")

NUM_LAYERS = 8
CONFIG = SimpleNamespace(num_hidden_layers=NUM_LAYERS)
CLASSES = (
    (DeepseekV3ForCausalLM, DeepseekV2Model),
    (GptOssForCausalLM, GptOssModel),
    (Gemma3ForCausalLM, Gemma3TextModel),
)
LAYER_IDS = (None, [1, 3, 5], [2, 3, 7], [0, 4, NUM_LAYERS - 2], [1, 3, NUM_LAYERS])


def _module(cls):
    module = cls.__new__(cls)
    nn.Module.__init__(module)
    return module


def target(cls, model_cls):
    """A ``cls`` holding what its capture reads: its config, its pipeline stage and a
    ``model_cls`` with NUM_LAYERS layers."""
    target = _module(cls)
    target.config = CONFIG
    target.pp_group = SimpleNamespace(is_last_rank=True)
    target.model = _module(model_cls)
    target.model.layers = nn.ModuleList(nn.Identity() for _ in range(NUM_LAYERS))
    target.model.layers_to_capture = []
    return target


def capture(model, layer_ids):
    configure_aux_hidden_state_capture(
        model=model,
        eagle_use_aux_hidden_state=True,
        eagle_aux_hidden_state_layer_ids=layer_ids,
        dflash_use_aux_hidden_state=False,
        dflash_target_layer_ids=None,
        is_dspark=False,
    )


def captured(model, layer_ids):
    capture(model, layer_ids)
    return list(model.model.layers_to_capture)


class TestOwnRulesCaptureContract(CustomTestCase):
    def test_each_class_captures_what_it_declares(self):
        for cls, model_cls in CLASSES:
            for layer_ids in LAYER_IDS:
                with self.subTest(cls.__name__, layer_ids=layer_ids):
                    self.assertEqual(
                        captured(target(cls, model_cls), layer_ids),
                        cls.get_eagle3_layers_to_capture(CONFIG, layer_ids),
                    )

    def test_the_classes_keep_their_rules(self):
        deepseek = DeepseekV3ForCausalLM.get_eagle3_layers_to_capture
        gpt_oss = GptOssForCausalLM.get_eagle3_layers_to_capture
        # DeepSeek-V2/V3 take ids as given unless the first is 1 (#25454).
        self.assertEqual(deepseek(CONFIG, [2, 3, 7]), [2, 3, 7])
        self.assertEqual(deepseek(CONFIG, [1, 3, 5]), [2, 4, 6])
        # GPT-OSS keeps ids ending at its layer count (#32334).
        self.assertEqual(gpt_oss(CONFIG, [1, 3, NUM_LAYERS]), [1, 3, NUM_LAYERS])
        self.assertEqual(gpt_oss(CONFIG, [1, 3, 7]), [2, 4, NUM_LAYERS])

    def test_a_class_that_delegates_answers_by_its_language_model(self):
        # Kimi-K2.5 hands the ids to its DeepSeek-V3 language model.
        kimi = SimpleNamespace(text_config=CONFIG)
        model = _module(KimiK25ForConditionalGeneration)
        model.language_model = target(DeepseekV3ForCausalLM, DeepseekV2Model)
        for layer_ids in LAYER_IDS:
            with self.subTest(layer_ids=layer_ids):
                capture(model, layer_ids)
                self.assertEqual(
                    model.language_model.model.layers_to_capture,
                    KimiK25ForConditionalGeneration.get_eagle3_layers_to_capture(
                        kimi, layer_ids
                    ),
                )

    def test_the_classes_that_capture_the_last_layers_output_say_so(self):
        for cls, final in (
            (GptOssForCausalLM, True),
            (Gemma3ForCausalLM, True),
            (DeepseekV3ForCausalLM, False),
        ):
            with self.subTest(cls.__name__):
                self.assertEqual(
                    getattr(cls, "eagle3_captures_final_hidden_state", False), final
                )


if __name__ == "__main__":
    unittest.main()
