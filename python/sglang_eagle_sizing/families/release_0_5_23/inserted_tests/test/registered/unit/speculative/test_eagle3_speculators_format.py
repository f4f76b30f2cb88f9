"""EAGLE-3 drafters saved by the speculators library load as LlamaForCausalLMEagle3, and
the target captures the hidden states their layer ids mean."""

import json
import re
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace

from torch import nn

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
    configure_aux_hidden_state_capture,
)
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    resolve_spec_aux_hidden_state_config,
)
from sglang.srt.models.deepseek_v2 import DeepseekV2Model, DeepseekV3ForCausalLM
from sglang.srt.models.llama import LlamaForCausalLM, LlamaModel
from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.utils.hf_transformers_utils import get_config
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=27, suite="base-a-test-cpu")

NUM_LAYERS = 6
TARGET = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 48,
    "num_attention_heads": 4,
    "num_hidden_layers": NUM_LAYERS,
}
# As speculators writes it: no model_type, the decoder layer's config nested.
SPECULATORS_DRAFT = {
    "architectures": ["Eagle3DraftModel"],
    "speculators_config": {"algorithm": "eagle3"},
    "transformer_layer_config": {**TARGET, "hidden_size": 64, "num_hidden_layers": 1},
    "draft_vocab_size": 96,
    "target_hidden_size": 48,
    "norm_before_residual": True,
}
LLAMA = (LlamaForCausalLM, LlamaModel)
DEEPSEEK = (DeepseekV3ForCausalLM, DeepseekV2Model)


class TestSpeculatorsFormat(CustomTestCase):
    def folder(self, config):
        """A new folder holding ``config`` (get_config caches a path's config)."""
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        (Path(folder.name) / "config.json").write_text(json.dumps(config))
        return folder.name

    def resolved(self, layer_ids):
        """What the model runner resolves for a drafter declaring ``layer_ids``."""
        draft = {**SPECULATORS_DRAFT, "eagle_aux_hidden_state_layer_ids": layer_ids}
        server_args = ServerArgs(
            model_path=self.folder(TARGET),
            device="cpu",
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=self.folder(draft),
            skip_tokenizer_init=True,
        )
        context = create_context(
            server_args, role="test", ranks=SpawnRanks(world_rank=0)
        )
        with use_context(context):
            resolved = resolve_spec_aux_hidden_state_config(
                server_args=server_args,
                model_config=ModelConfig.from_server_args(server_args),
                spec_algorithm=SpeculativeAlgorithm.EAGLE3,
                is_draft_worker=False,
            )
        return resolved

    def captured(self, layer_ids, target=LLAMA):
        """The layers a target captures for a drafter declaring ``layer_ids``."""
        resolved = self.resolved(layer_ids)
        # A target holding only what its capture reads.
        model, inner = (cls.__new__(cls) for cls in target)
        for module in (model, inner):
            nn.Module.__init__(module)
        inner.layers = nn.ModuleList(nn.Identity() for _ in range(NUM_LAYERS))
        inner.layers_to_capture = []
        model.model = inner
        model.config = SimpleNamespace(num_hidden_layers=NUM_LAYERS)
        model.pp_group = SimpleNamespace(is_last_rank=True)
        configure_aux_hidden_state_capture(
            model=model,
            eagle_use_aux_hidden_state=resolved.eagle_use_aux_hidden_state,
            eagle_aux_hidden_state_layer_ids=resolved.eagle_aux_hidden_state_layer_ids,
            eagle_aux_hidden_state_indices=resolved.eagle_aux_hidden_state_indices,
            dflash_use_aux_hidden_state=False,
            dflash_target_layer_ids=None,
            is_dspark=False,
        )
        return list(inner.layers_to_capture)

    def test_only_a_speculators_config_reads_as_llama_eagle3(self):
        config = get_config(self.folder(SPECULATORS_DRAFT), trust_remote_code=False)
        self.assertEqual(config.architectures, ["LlamaForCausalLMEagle3"])
        self.assertEqual((config.hidden_size, config.target_hidden_size), (64, 48))
        self.assertEqual(config.draft_vocab_size, 96)
        self.assertTrue(config.norm_before_residual)
        config = get_config(self.folder(TARGET), trust_remote_code=False)
        self.assertEqual(config.architectures, ["LlamaForCausalLM"])
        self.assertFalse(hasattr(config, "draft_vocab_size"))

    def test_layer_ids_name_the_targets_hidden_states(self):
        # speculators' id k is the target's output_hidden_states[k] (0: the
        # embeddings), the output of layer k - 1: SGLang's id k - 1.
        resolved = self.resolved([1, 3, 5])
        self.assertEqual(resolved.eagle_aux_hidden_state_layer_ids, [0, 2, 4])

    def test_every_target_captures_the_hidden_states_the_ids_name(self):
        # Llama captures the output of SGLang's ids; DeepSeek-V3 takes them as
        # given unless the first is 1.
        for target, layer_ids in (
            (LLAMA, [1, 3, 5]),
            (LLAMA, [2, 4, 5]),
            (DEEPSEEK, [3, 4, 5]),
            (DEEPSEEK, [2, 4, 5]),
        ):
            with self.subTest(target[0].__name__, layer_ids=layer_ids):
                self.assertEqual(self.captured(layer_ids, target), layer_ids)

    def test_ids_no_target_captures_are_refused_as_declared(self):
        # output_hidden_states[NUM_LAYERS] is after the final norm; no ids make
        # DeepSeek-V3 capture the first layer's output alone.
        for target, layer_ids, reason in (
            (LLAMA, [1, 3, NUM_LAYERS], f"index {NUM_LAYERS}, the final hidden state"),
            (LLAMA, [0, 3], "0, the embeddings, is not captured"),
            (DEEPSEEK, [1, 4, 5], "hidden-state indices.*target DeepseekV3ForCausalLM"),
        ):
            declared = re.escape(f"eagle_aux_hidden_state_layer_ids={layer_ids}")
            with (
                self.subTest(layer_ids),
                self.assertRaisesRegex(ValueError, f"{declared}.*{reason}"),
            ):
                self.captured(layer_ids, target)


if __name__ == "__main__":
    unittest.main()
