"""The classes that add 1 to an EAGLE-3 drafter's layer ids and hold the result on their
model capture, through the model runner's call, what the release captures for layer ids
and exactly the hidden states they are handed as indices."""

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
CLASSES = {
    "apertus": ["ApertusForCausalLM"],
    "exaone_moe": ["ExaoneMoEForCausalLM"],
    "glm4_moe": ["Glm4MoeForCausalLM"],
    "glm5_next": ["Glm5NextForConditionalGeneration"],
    "llama": [
        "LlamaForCausalLM",
        "Phi3ForCausalLM",
        "InternLM3ForCausalLM",
        "IQuestCoderForCausalLM",
    ],
    "longcat_flash": ["LongcatFlashForCausalLM"],
    "minimax_m2": ["MiniMaxM2ForCausalLM"],
    "qwen2": ["Qwen2ForCausalLM"],
    "qwen3": ["Qwen3ForCausalLM"],
}
# What each class captures for a drafter's layer ids on the release (None: its default
# layers), as hidden-state indices (0: the embeddings, i: the output of layer i - 1).
RELEASED = (
    (None, [2, 4, 5]),
    ([1, 3, 5], [2, 4, 6]),
    ([0, 2, 6], [1, 3, 7]),
)


def target(cls):
    """A ``cls`` holding what its capture reads: config, pipeline stage and model."""
    config = SimpleNamespace(num_hidden_layers=NUM_LAYERS)
    config.text_config = config
    model = cls.__new__(cls)
    model.__dict__.update(
        config=config,
        pp_group=LAST_RANK,
        model=SimpleNamespace(layers_to_capture=[], layers=[None] * NUM_LAYERS),
    )
    return model


def captured(cls, layer_ids=None, hidden_state_ids=None):
    model = target(cls)
    with get_parallel().override(pp_group=LAST_RANK):
        if hidden_state_ids is not None:
            model.set_eagle3_hidden_states_to_capture(hidden_state_ids)
        else:
            configure_aux_hidden_state_capture(
                model=model,
                eagle_use_aux_hidden_state=True,
                eagle_aux_hidden_state_layer_ids=layer_ids,
                dflash_use_aux_hidden_state=False,
                dflash_target_layer_ids=None,
                is_dspark=False,
            )
    return model.model.layers_to_capture


def classes():
    for file, names in CLASSES.items():
        module = importlib.import_module(f"sglang.srt.models.{file}")
        for name in names:
            yield getattr(module, name)


class TestAddOneCaptureContract(CustomTestCase):
    def test_layer_ids_capture_as_on_the_release(self):
        for cls in classes():
            for layer_ids, hidden_states in RELEASED:
                with self.subTest(cls.__name__, layer_ids=layer_ids):
                    self.assertEqual(captured(cls, layer_ids), hidden_states)
                    self.assertEqual(
                        cls.get_eagle3_layers_to_capture(target(cls).config, layer_ids),
                        hidden_states,
                    )

    def test_hidden_state_ids_are_captured_as_they_are(self):
        for cls in classes():
            for hidden_state_ids in ([0, 3, 7], [1, 2, 3, 4]):
                with self.subTest(cls.__name__, hidden_state_ids=hidden_state_ids):
                    self.assertEqual(
                        captured(cls, hidden_state_ids=hidden_state_ids),
                        hidden_state_ids,
                    )

    def test_none_captures_the_last_layers_output(self):
        for cls in classes():
            with self.subTest(cls.__name__):
                self.assertFalse(
                    getattr(cls, "eagle3_captures_final_hidden_state", False)
                )


if __name__ == "__main__":
    unittest.main()
