"""Qwen3-MoE says, from its config alone, which hidden states it captures for an EAGLE-3
drafter's layer ids, and hands those to its inner model, which flags its layers."""

import unittest
from types import SimpleNamespace

from torch import nn

from sglang.srt.models.qwen3_moe import Qwen3MoeForCausalLM, Qwen3MoeModel
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

NUM_LAYERS = 8
CONFIG = SimpleNamespace(num_hidden_layers=NUM_LAYERS)


def target():
    """A Qwen3-MoE holding its config, stage and an inner model of NUM_LAYERS layers."""
    model = Qwen3MoeModel.__new__(Qwen3MoeModel)
    nn.Module.__init__(model)
    model.layers = nn.ModuleList(nn.Identity() for _ in range(NUM_LAYERS))
    qwen = Qwen3MoeForCausalLM.__new__(Qwen3MoeForCausalLM)
    nn.Module.__init__(qwen)
    qwen.config = CONFIG
    qwen.pp_group = SimpleNamespace(is_last_rank=True)
    qwen.model = model
    return qwen


class TestQwen3MoeCaptureContract(CustomTestCase):
    def test_qwen3_moe_hands_on_what_it_declares(self):
        for layer_ids in (None, [0, 3, 5], [1, 2, 6]):
            with self.subTest(layer_ids=layer_ids):
                qwen = target()
                qwen.set_eagle3_layers_to_capture(layer_ids)
                declared = Qwen3MoeForCausalLM.get_eagle3_layers_to_capture(
                    CONFIG, layer_ids
                )
                self.assertEqual(qwen.model.layers_to_capture, declared)
                flagged = [
                    i
                    for i, layer in enumerate(qwen.model.layers)
                    if getattr(layer, "_is_layer_to_capture", False)
                ]
                self.assertEqual(flagged, sorted(declared))

    def test_qwen3_moe_keeps_its_rule(self):
        declared = Qwen3MoeForCausalLM.get_eagle3_layers_to_capture
        self.assertEqual(declared(CONFIG, [1, 3, 5]), [2, 4, 6])
        self.assertFalse(
            getattr(Qwen3MoeForCausalLM, "eagle3_captures_final_hidden_state", False)
        )


if __name__ == "__main__":
    unittest.main()
