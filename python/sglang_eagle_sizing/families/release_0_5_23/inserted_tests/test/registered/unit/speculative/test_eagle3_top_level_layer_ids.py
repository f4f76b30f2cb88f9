"""EAGLE-3: the target captures the layers a drafter names, whether its config declares
them in eagle_config or at its top level."""

import json
import os
import tempfile
import unittest

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    SpecAuxHiddenStateConfig,
    _resolve_eagle_aux_hidden_state,
)
from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 6,
    "vocab_size": 128,
    "torch_dtype": "float32",
}
DRAFT = {
    **LLAMA,
    "architectures": ["LlamaForCausalLMEagle3"],
    "num_hidden_layers": 1,
}


class TestTopLevelLayerIds(CustomTestCase):
    def captured(self, **draft_keys):
        """The layers the target's start-up captures for the drafter (None: the
        target's default layers)."""
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        paths = {}
        for name, config in (("target", LLAMA), ("draft", {**DRAFT, **draft_keys})):
            paths[name] = os.path.join(folder.name, name)
            os.makedirs(paths[name])
            with open(os.path.join(paths[name], "config.json"), "w") as f:
                json.dump(config, f)
        server_args = ServerArgs(
            model_path=paths["target"],
            device="cpu",
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=paths["draft"],
            skip_tokenizer_init=True,
        )
        context = create_context(
            server_args, role="test", ranks=SpawnRanks(world_rank=0)
        )
        capture = SpecAuxHiddenStateConfig()
        with use_context(context):
            _resolve_eagle_aux_hidden_state(
                config=capture,
                server_args=server_args,
                model_config=ModelConfig.from_server_args(server_args),
                spec_algorithm=SpeculativeAlgorithm.EAGLE3,
                is_draft_worker=False,
            )
        return capture.eagle_aux_hidden_state_layer_ids

    def test_layer_ids_at_the_top_level_are_captured(self):
        # Captured the target's default layers instead, and fed fc a wrong width.
        self.assertEqual(
            self.captured(eagle_aux_hidden_state_layer_ids=[0, 1, 2, 3]), [0, 1, 2, 3]
        )

    def test_layer_ids_in_eagle_config_are_captured(self):
        eagle_config = {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
        self.assertEqual(self.captured(eagle_config=eagle_config), [0, 2, 4])

    def test_no_layer_ids_means_the_targets_default_layers(self):
        self.assertIsNone(self.captured())


if __name__ == "__main__":
    unittest.main()
