"""The classes that add 1 to an EAGLE-3 drafter's layer ids and hand the result on (to an
inner model's method, flags on the layers, a multimodal model's inner model) capture,
through the model runner's call, what the release captures for layer ids and exactly the
hidden states they are handed as indices."""

import importlib
import unittest
from types import SimpleNamespace

from torch import nn

from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
    configure_aux_hidden_state_capture,
)
from sglang.srt.runtime_context import get_parallel
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=30, suite="base-a-test-cpu")

NUM_LAYERS = 8
LAST_RANK = SimpleNamespace(is_last_rank=True)
# (file, class, the inner model class it hands the indices to, whether its layers are
# flagged), and what it captures on the release for the layer ids [None, [1, 3, 5],
# [0, 2, 6]] as hidden-state indices (0: the embeddings, i: the output of layer i - 1).
ADD_ONE = [[2, 4, 5], [2, 4, 6], [1, 3, 7]]
CLASSES = (
    ("bailing_moe", "BailingMoEForCausalLM", None, False, ADD_ONE),
    ("bailing_moe", "BailingMoeForCausalLM", None, False, ADD_ONE),
    ("bailing_moe", "BailingMoeV2ForCausalLM", None, False, ADD_ONE),
    ("minimax_m3", "MiniMaxM3SparseForCausalLM", None, True, ADD_ONE),
    (
        "minimax_m3_vl",
        "MiniMaxM3SparseForConditionalGeneration",
        None,
        True,
        # its default layers are the drafter's defaults plus 1
        [[3, 5, 6], [2, 4, 6], [1, 3, 7]],
    ),
    ("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", None, False, ADD_ONE),
    ("qwen2_moe", "Qwen2MoeForCausalLM", ("qwen2_moe", "Qwen2MoeModel"), True, ADD_ONE),
    ("qwen3_moe", "Qwen3MoeForCausalLM", ("qwen3_moe", "Qwen3MoeModel"), True, ADD_ONE),
    (
        "qwen3_next",
        "Qwen3NextForCausalLM",
        ("qwen3_next", "Qwen3NextModel"),
        True,
        ADD_ONE,
    ),
    (
        "qwen3_5_text",
        "Qwen3_5ForCausalLM",
        ("qwen3_5", "Qwen3_5ForCausalLM"),
        True,
        ADD_ONE,
    ),
    (
        "qwen3_5_text",
        "Qwen3_5MoeForCausalLM",
        ("qwen3_5", "Qwen3_5ForCausalLM"),
        True,
        ADD_ONE,
    ),
    ("qwen3_vl", "Qwen3VLForConditionalGeneration", None, False, ADD_ONE),
    ("qwen3_5", "Qwen3_5ForConditionalGeneration", None, False, ADD_ONE),
    ("qwen3_5", "Qwen3_5MoeForConditionalGeneration", None, False, ADD_ONE),
)
LAYER_IDS = (None, [1, 3, 5], [0, 2, 6])


def _class(file, name):
    return getattr(importlib.import_module(f"sglang.srt.models.{file}"), name)


def target(cls, inner):
    """A ``cls`` holding what its capture reads: config, pipeline stage and a model of
    NUM_LAYERS layers (``inner``, or a plain holder)."""
    config = SimpleNamespace(num_hidden_layers=NUM_LAYERS)
    config.text_config = config
    if inner is None:
        model = SimpleNamespace(layers_to_capture=[])
        model.layers = [SimpleNamespace() for _ in range(NUM_LAYERS)]
    else:
        model = inner.__new__(inner)
        nn.Module.__init__(model)
        model.layers = nn.ModuleList(nn.Identity() for _ in range(NUM_LAYERS))
    holder = cls.__new__(cls)
    holder.__dict__.update(config=config, pp_group=LAST_RANK, model=model)
    return holder


def capture(model, layer_ids=None, hidden_state_ids=None):
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
    flagged = [
        i
        for i, layer in enumerate(model.model.layers)
        if getattr(layer, "_is_layer_to_capture", False)
    ]
    return list(model.model.layers_to_capture), flagged


class TestHandedOnCaptureContract(CustomTestCase):
    def test_layer_ids_capture_as_on_the_release(self):
        for file, name, inner, flags, released in CLASSES:
            cls = _class(file, name)
            inner = inner and _class(*inner)
            for layer_ids, hidden_states in zip(LAYER_IDS, released):
                with self.subTest(name, layer_ids=layer_ids):
                    got, flagged = capture(target(cls, inner), layer_ids)
                    self.assertEqual(got, hidden_states)
                    self.assertEqual(flagged, hidden_states if flags else [])
                    # what the check before load reads of the class
                    config = target(cls, inner).config
                    self.assertEqual(
                        cls.get_eagle3_layers_to_capture(config, layer_ids),
                        hidden_states,
                    )

    def test_hidden_state_ids_are_captured_as_they_are(self):
        for file, name, inner, flags, _ in CLASSES:
            cls = _class(file, name)
            inner = inner and _class(*inner)
            for hidden_state_ids in ([0, 3, 7], [1, 2, 3, 4]):
                with self.subTest(name, hidden_state_ids=hidden_state_ids):
                    got, flagged = capture(
                        target(cls, inner), hidden_state_ids=hidden_state_ids
                    )
                    self.assertEqual(got, hidden_state_ids)
                    self.assertEqual(flagged, hidden_state_ids if flags else [])


if __name__ == "__main__":
    unittest.main()
