"""Llama says, from its config alone, which hidden states it captures for an EAGLE-3
drafter's layer ids, and its set_eagle3_layers_to_capture captures exactly that."""

import unittest
from types import SimpleNamespace

from sglang.srt.models.llama import LlamaForCausalLM
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

CONFIG = SimpleNamespace(num_hidden_layers=8)


def captured(layer_ids):
    """What the method sets on a Llama holding only its config, stage and model."""
    llama = LlamaForCausalLM.__new__(LlamaForCausalLM)
    llama.__dict__.update(
        config=CONFIG,
        pp_group=SimpleNamespace(is_last_rank=True),
        model=SimpleNamespace(layers_to_capture=[]),
    )
    llama.set_eagle3_layers_to_capture(layer_ids)
    return llama.model.layers_to_capture


class TestLlamaCaptureContract(CustomTestCase):
    def test_llama_captures_what_it_declares(self):
        for layer_ids in (None, [0, 3, 5], [1, 4, 7]):
            with self.subTest(layer_ids=layer_ids):
                self.assertEqual(
                    captured(layer_ids),
                    LlamaForCausalLM.get_eagle3_layers_to_capture(CONFIG, layer_ids),
                )

    def test_llama_keeps_its_rule(self):
        # The output of layer id: the input of layer id + 1.
        declared = LlamaForCausalLM.get_eagle3_layers_to_capture
        self.assertEqual(declared(CONFIG, [1, 3, 5]), [2, 4, 6])
        self.assertEqual(declared(CONFIG, None), [2, 4, 5])
        self.assertFalse(
            getattr(LlamaForCausalLM, "eagle3_captures_final_hidden_state", False)
        )


if __name__ == "__main__":
    unittest.main()
