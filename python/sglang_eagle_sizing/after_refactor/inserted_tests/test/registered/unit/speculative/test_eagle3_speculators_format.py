"""EAGLE-3 drafters saved by the speculators library load as LlamaForCausalLMEagle3, and
the target captures the hidden states their layer ids mean."""

from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")

import re
import sys
import unittest
from pathlib import Path

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
    configure_aux_hidden_state_capture,
)
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    SpecAuxHiddenStateConfig,
    _resolve_eagle_aux_hidden_state,
)
from sglang.srt.models.deepseek_v2 import DeepseekV2Model, DeepseekV3ForCausalLM
from sglang.srt.models.llama import LlamaForCausalLM, LlamaModel
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.utils.hf_transformers_utils import get_config

CURRENT_DIR = Path(__file__).resolve().parent
if str(CURRENT_DIR) not in sys.path:
    sys.path.insert(0, str(CURRENT_DIR))

from common import LLAMA, TARGET, TARGET_HIDDEN_SIZE, TARGET_NUM_LAYERS, DrafterTestCase
from test_capture_rule import target

# A config.json as speculators writes it: no model_type, the decoder layer's config nested.
SPECULATORS_DRAFT = {
    "architectures": ["Eagle3DraftModel"],
    "speculators_model_type": "eagle3",
    "speculators_config": {
        "algorithm": "eagle3",
        "verifier": {"architectures": ["LlamaForCausalLM"], "name_or_path": "target"},
    },
    "transformer_layer_config": {**LLAMA, "hidden_size": 64, "num_hidden_layers": 1},
    "draft_vocab_size": 96,
    "target_hidden_size": TARGET_HIDDEN_SIZE,
    "norm_before_residual": True,
}


class TestSpeculatorsFormat(DrafterTestCase):
    def _captured(self, **draft_keys):
        server_args = self.server_args({**SPECULATORS_DRAFT, **draft_keys})
        with self.published(server_args):
            return self.captured_layer_ids(server_args)

    def test_the_config_reads_as_llama_eagle3(self):
        self.write_config(self.folder, SPECULATORS_DRAFT)
        config = get_config(self.folder, trust_remote_code=False)
        self.assertEqual(config.architectures, ["LlamaForCausalLMEagle3"])
        self.assertEqual(
            (config.hidden_size, config.target_hidden_size, config.draft_vocab_size),
            (64, TARGET_HIDDEN_SIZE, 96),
        )
        self.assertTrue(config.norm_before_residual)

    def test_a_config_autoconfig_reads_is_left_as_it_is(self):
        self.write_config(self.folder, TARGET)
        config = get_config(self.folder, trust_remote_code=False)
        self.assertEqual(config.architectures, ["LlamaForCausalLM"])
        self.assertFalse(hasattr(config, "draft_vocab_size"))

    def test_layer_ids_name_the_targets_hidden_states(self):
        # speculators' id k is the target's output_hidden_states[k] (0: the embeddings),
        # the output of layer k - 1: SGLang's id k - 1.
        self.assertEqual(
            self._captured(eagle_aux_hidden_state_layer_ids=[1, 3, 5]), [0, 2, 4]
        )

    def test_the_final_hidden_state_is_refused_naming_the_declared_ids(self):
        # output_hidden_states[num_layers] is after the final norm, which no target
        # captures.
        layer_ids = [1, 3, TARGET_NUM_LAYERS]
        with self.assertRaisesRegex(
            ValueError,
            rf"eagle_aux_hidden_state_layer_ids={re.escape(str(layer_ids))} .*"
            rf"index {TARGET_NUM_LAYERS}, the final hidden state after the norm, is not "
            "captured",
        ):
            self._captured(eagle_aux_hidden_state_layer_ids=layer_ids)

    def _captured_by(self, cls, model_cls, layer_ids):
        """The hidden states a ``cls`` target captures for the drafter, as the model
        runner configures it from the config it resolved."""
        server_args = self.server_args(
            {**SPECULATORS_DRAFT, "eagle_aux_hidden_state_layer_ids": layer_ids}
        )
        resolved = SpecAuxHiddenStateConfig()
        with self.published(server_args):
            _resolve_eagle_aux_hidden_state(
                config=resolved,
                server_args=server_args,
                model_config=ModelConfig.from_server_args(server_args),
                spec_algorithm=SpeculativeAlgorithm.EAGLE3,
                is_draft_worker=False,
            )
        model = target(cls, model_cls)
        configure_aux_hidden_state_capture(
            model=model,
            eagle_use_aux_hidden_state=resolved.eagle_use_aux_hidden_state,
            eagle_aux_hidden_state_layer_ids=resolved.eagle_aux_hidden_state_layer_ids,
            eagle_aux_hidden_state_indices=resolved.eagle_aux_hidden_state_indices,
            dflash_use_aux_hidden_state=False,
            dflash_target_layer_ids=None,
            is_dspark=False,
        )
        return list(model.model.layers_to_capture)

    def test_every_target_captures_the_hidden_states_the_ids_name(self):
        # DeepSeek-V2/V3 take SGLang's ids as given unless the first is 1.
        for cls, model_cls in (
            (LlamaForCausalLM, LlamaModel),
            (DeepseekV3ForCausalLM, DeepseekV2Model),
        ):
            for layer_ids in ([3, 4, 5], [2, 4, 5]):
                with self.subTest(cls.__name__, layer_ids=layer_ids):
                    self.assertEqual(self._captured_by(cls, model_cls, layer_ids), layer_ids)

    def test_a_target_whose_rule_cannot_capture_them_is_refused(self):
        # No ids make DeepSeek-V3 capture the first layer's output alone.
        with self.assertRaisesRegex(
            ValueError,
            r"\[1, 4, 5\] \(hidden-state indices\) for the target DeepseekV3ForCausalLM",
        ):
            self._captured_by(DeepseekV3ForCausalLM, DeepseekV2Model, [1, 4, 5])

    def test_the_embeddings_are_refused(self):
        with self.assertRaisesRegex(ValueError, r"eagle_aux_hidden_state_layer_ids=\[0, 3\]"):
            self._captured(eagle_aux_hidden_state_layer_ids=[0, 3])


if __name__ == "__main__":
    unittest.main()
