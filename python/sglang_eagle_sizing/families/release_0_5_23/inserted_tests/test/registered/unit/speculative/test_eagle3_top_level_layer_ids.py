"""EAGLE-3: ids at the top level of a drafter's config (vLLM's key) name the target's
hidden states, as transformers' output_hidden_states counts them, and reach the target
as they are; eagle_config's are layer ids, each read by the target class's own rule."""

import json
import os
import tempfile
import unittest
from types import SimpleNamespace

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
    configure_aux_hidden_state_capture,
)
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    SpecAuxHiddenStateConfig,
    _resolve_eagle_aux_hidden_state,
)
from sglang.srt.models.llama import LlamaForCausalLM
from sglang.srt.runtime_context import (
    SpawnRanks,
    publish,
    restore_context,
    snapshot_context,
)
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=30, suite="base-a-test-cpu")

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
        """The hidden states the target's start-up captures for the drafter: the
        runner's resolution, then its call on a Llama holding its config and model."""
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
        capture = SpecAuxHiddenStateConfig()
        self.addCleanup(restore_context, snapshot_context())
        publish(server_args, role="test", ranks=SpawnRanks(world_rank=0))
        model_config = ModelConfig.from_server_args(server_args)
        _resolve_eagle_aux_hidden_state(
            config=capture,
            server_args=server_args,
            model_config=model_config,
            spec_algorithm=SpeculativeAlgorithm.EAGLE3,
            is_draft_worker=False,
        )
        llama = LlamaForCausalLM.__new__(LlamaForCausalLM)
        llama.__dict__.update(
            config=model_config.hf_config,
            pp_group=SimpleNamespace(is_last_rank=True),
            model=SimpleNamespace(layers_to_capture=[]),
        )
        configure_aux_hidden_state_capture(
            model=llama,
            eagle_use_aux_hidden_state=capture.eagle_use_aux_hidden_state,
            eagle_aux_hidden_state_layer_ids=capture.eagle_aux_hidden_state_layer_ids,
            eagle_aux_hidden_state_indices=capture.eagle_aux_hidden_state_indices,
            dflash_use_aux_hidden_state=False,
            dflash_target_layer_ids=None,
            is_dspark=False,
        )
        return llama.model.layers_to_capture

    def test_ids_at_the_top_level_are_the_hidden_states_captured(self):
        # The target captured its default layers [2, 3, 3] instead; with 4 ids
        # fc failed at the first request.
        self.assertEqual(self.captured(**{LAYER_IDS: [1, 2, 3, 4]}), [1, 2, 3, 4])
        self.assertEqual(self.captured(**{LAYER_IDS: [2, 3, 5]}), [2, 3, 5])
        # The embeddings' output, which no layer id names on Llama.
        self.assertEqual(self.captured(**{LAYER_IDS: [0, 3, 5]}), [0, 3, 5])

    def test_layer_ids_in_eagle_config_keep_the_targets_rule(self):
        self.assertEqual(self.captured(eagle_config={LAYER_IDS: [0, 2, 4]}), [1, 3, 5])

    def test_eagle_config_comes_first(self):
        # As the release serves it: fc and the buffers read eagle_config's ids.
        captured = self.captured(
            eagle_config={LAYER_IDS: [0, 2, 4]}, **{LAYER_IDS: [1, 2, 3, 4]}
        )
        self.assertEqual(captured, [1, 3, 5])

    def test_no_layer_ids_means_the_targets_default_layers(self):
        self.assertEqual(self.captured(), [2, 3, 3])


LAYER_IDS = "eagle_aux_hidden_state_layer_ids"

if __name__ == "__main__":
    unittest.main()
