"""The target captures an EAGLE-3 drafter's aux hidden states by its class's own rule,
and refuses the layer ids it cannot capture before it serves."""

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
from sglang.srt.models.llama import LlamaForCausalLM, LlamaModel
from sglang.srt.models.qwen3_moe import Qwen3MoeForCausalLM, Qwen3MoeModel
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=24, suite="base-a-test-cpu")

NUM_LAYERS = 8


def _module(cls):
    module = cls.__new__(cls)
    nn.Module.__init__(module)
    return module


def target(cls, model_cls):
    """A ``cls`` holding what its capture reads: its config, its pipeline stage and a
    ``model_cls`` with NUM_LAYERS layers."""
    target = _module(cls)
    target.config = SimpleNamespace(num_hidden_layers=NUM_LAYERS)
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


class TestCaptureRule(CustomTestCase):
    def captured(self, cls, model_cls, layer_ids):
        model = target(cls, model_cls)
        capture(model, layer_ids)
        return list(model.model.layers_to_capture)

    def test_llama_captures_the_output_of_each_layer_id(self):
        self.assertEqual(
            self.captured(LlamaForCausalLM, LlamaModel, [1, 3, 5]), [2, 4, 6]
        )

    def test_deepseek_takes_ids_as_given_unless_the_first_is_1(self):
        captured = self.captured(DeepseekV3ForCausalLM, DeepseekV2Model, [2, 3, 7])
        self.assertEqual(captured, [2, 3, 7])
        captured = self.captured(DeepseekV3ForCausalLM, DeepseekV2Model, [1, 3, 5])
        self.assertEqual(captured, [2, 4, 6])

    def test_gpt_oss_captures_its_last_layers_output(self):
        last = NUM_LAYERS
        self.assertEqual(
            self.captured(GptOssForCausalLM, GptOssModel, [1, 3, last]), [1, 3, last]
        )
        self.assertEqual(
            self.captured(GptOssForCausalLM, GptOssModel, [1, 3, last - 1]),
            [2, 4, last],
        )

    def test_gemma3_captures_its_last_layers_output(self):
        self.assertEqual(
            self.captured(Gemma3ForCausalLM, Gemma3TextModel, [1, 3, NUM_LAYERS - 1]),
            [2, 4, NUM_LAYERS],
        )

    def test_the_last_layers_output_is_refused_where_the_target_drops_it(self):
        for cls, model_cls in (
            (LlamaForCausalLM, LlamaModel),
            (Qwen3MoeForCausalLM, Qwen3MoeModel),
            (DeepseekV3ForCausalLM, DeepseekV2Model),
        ):
            with (
                self.subTest(cls.__name__),
                self.assertRaisesRegex(
                    ValueError,
                    rf"\[1, 3, {NUM_LAYERS - 1}\] for the target {cls.__name__}: "
                    rf"it captures hidden states \[2, 4, {NUM_LAYERS}\]"
                    rf".*up to {NUM_LAYERS - 1}",
                ),
            ):
                capture(target(cls, model_cls), [1, 3, NUM_LAYERS - 1])

    def test_a_target_that_delegates_its_capture_is_checked(self):
        # Kimi-K2.5 hands the ids to its DeepSeek-V3 language model.
        model = _module(KimiK25ForConditionalGeneration)
        model.language_model = target(DeepseekV3ForCausalLM, DeepseekV2Model)
        capture(model, [2, 3, 7])
        self.assertEqual(model.language_model.model.layers_to_capture, [2, 3, 7])
        with self.assertRaisesRegex(ValueError, "KimiK25ForConditionalGeneration"):
            capture(model, [1, 3, 7])


if __name__ == "__main__":
    unittest.main()
