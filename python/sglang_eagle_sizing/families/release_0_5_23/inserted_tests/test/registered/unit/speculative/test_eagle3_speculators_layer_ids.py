"""EAGLE-3 drafters saved by the speculators library: the target captures the hidden
states their layer ids mean, as it does for the same ids at the top level."""

import json
import re
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace

from sglang.srt.arg_groups.speculative_hook import _handle_eagle3_draft_check
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner_components.attention_backend_setup import (
    configure_aux_hidden_state_capture,
)
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    resolve_spec_aux_hidden_state_config,
)
from sglang.srt.model_loader.utils import get_model_architecture
from sglang.srt.runtime_context import (
    SpawnRanks,
    get_parallel,
    publish,
    restore_context,
    snapshot_context,
)
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=60, suite="base-a-test-cpu")

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
    "speculators_model_type": "eagle3",
    "speculators_config": {"algorithm": "eagle3"},
    "transformer_layer_config": {**TARGET, "hidden_size": 64, "num_hidden_layers": 1},
    "draft_vocab_size": 96,
    "target_hidden_size": 48,
    "norm_before_residual": True,
}
# An SGLang EAGLE-3 config declaring the same ids at the top level (vLLM's key).
TOP_LEVEL_DRAFT = {
    **SPECULATORS_DRAFT["transformer_layer_config"],
    "architectures": ["LlamaForCausalLMEagle3"],
    "draft_vocab_size": 96,
    "target_hidden_size": 48,
}
GPT_OSS = {
    **TARGET,
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "num_key_value_heads": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "head_dim": 12,
}
DEEPSEEK = {
    **TARGET,
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "kv_lora_rank": 16,
    "q_lora_rank": None,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
}


class TestSpeculatorsFormat(CustomTestCase):
    def folder(self, config):
        """A new folder holding ``config`` (get_config caches a path's config)."""
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        (Path(folder.name) / "config.json").write_text(json.dumps(config))
        return folder.name

    def server_args(self, layer_ids, target=TARGET, draft=SPECULATORS_DRAFT):
        draft = {**draft, "eagle_aux_hidden_state_layer_ids": layer_ids}
        return ServerArgs(
            model_path=self.folder(target),
            device="cpu",
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=self.folder(draft),
            skip_tokenizer_init=True,
        )

    def resolved(self, layer_ids, target=TARGET, draft=SPECULATORS_DRAFT):
        """What the model runner resolves for a drafter declaring ``layer_ids``, and
        the target's config."""
        server_args = self.server_args(layer_ids, target, draft)
        self.addCleanup(restore_context, snapshot_context())
        publish(server_args, role="test", ranks=SpawnRanks(world_rank=0))
        model_config = ModelConfig.from_server_args(server_args)
        resolved = resolve_spec_aux_hidden_state_config(
            server_args=server_args,
            model_config=model_config,
            spec_algorithm=SpeculativeAlgorithm.EAGLE3,
            is_draft_worker=False,
        )
        return resolved, model_config

    def captured(self, layer_ids, target=TARGET):
        """The hidden states the target class captures for a drafter declaring
        ``layer_ids``."""
        resolved, model_config = self.resolved(layer_ids, target)
        model_cls, _ = get_model_architecture(model_config)
        model = model_cls.__new__(model_cls)
        last_rank = SimpleNamespace(is_last_rank=True)
        model.__dict__.update(
            config=model_config.hf_config,
            pp_group=last_rank,
            model=SimpleNamespace(layers_to_capture=[]),
        )
        with get_parallel().override(pp_group=last_rank):
            configure_aux_hidden_state_capture(
                model=model,
                eagle_use_aux_hidden_state=resolved.eagle_use_aux_hidden_state,
                eagle_aux_hidden_state_layer_ids=resolved.eagle_aux_hidden_state_layer_ids,
                eagle_aux_hidden_state_indices=resolved.eagle_aux_hidden_state_indices,
                dflash_use_aux_hidden_state=False,
                dflash_target_layer_ids=None,
                is_dspark=False,
            )
        return model.model.layers_to_capture

    def test_layer_ids_name_the_targets_hidden_states(self):
        # speculators' id k is the target's output_hidden_states[k] (0: the
        # embeddings), the output of layer k - 1: handed to the target as it is.
        resolved, _ = self.resolved([1, 3, 5])
        self.assertEqual(resolved.eagle_aux_hidden_state_indices, [1, 3, 5])
        self.assertIsNone(resolved.eagle_aux_hidden_state_layer_ids)

    def test_the_ids_are_read_as_top_level_ids_are(self):
        # Both are hidden-state indices (0: the embeddings): the same ids are
        # accepted, and the target is handed the same layer ids.
        for layer_ids in ([0, 3, 5], [1, 3, 5]):
            with self.subTest(layer_ids):
                for draft in (SPECULATORS_DRAFT, TOP_LEVEL_DRAFT):
                    server_args = self.server_args(layer_ids, draft=draft)
                    _handle_eagle3_draft_check(server_args)
                resolved = [
                    self.resolved(layer_ids, draft=draft)[0]
                    for draft in (SPECULATORS_DRAFT, TOP_LEVEL_DRAFT)
                ]
                self.assertEqual(
                    *[
                        (
                            r.eagle_aux_hidden_state_layer_ids,
                            r.eagle_aux_hidden_state_indices,
                        )
                        for r in resolved
                    ]
                )

    def test_every_target_captures_the_hidden_states_the_ids_name(self):
        # Whatever rule the class reads layer ids by (DeepSeek-V3 takes them as
        # given unless the first is 1), it captures the indices as they are.
        for target, layer_ids in (
            (TARGET, [1, 3, 5]),
            (TARGET, [2, 4, 5]),
            (DEEPSEEK, [3, 4, 5]),
            (DEEPSEEK, [2, 4, 5]),
            (DEEPSEEK, [1, 4, 5]),
            # index NUM_LAYERS: the last layer's output, which GPT-OSS captures
            (GPT_OSS, [1, 3, NUM_LAYERS]),
        ):
            with self.subTest(target["architectures"][0], layer_ids=layer_ids):
                self.assertEqual(self.captured(layer_ids, target), layer_ids)

    def test_ids_no_target_captures_are_refused_before_the_weights_load(self):
        # index NUM_LAYERS: Llama and DeepSeek-V3 drop the last layer's output.
        for target, layer_ids, reason in (
            (TARGET, [1, 3, NUM_LAYERS], f"LlamaForCausalLM.*0 to {NUM_LAYERS - 1}"),
            (
                DEEPSEEK,
                [1, 4, NUM_LAYERS],
                f"DeepseekV3ForCausalLM.*0 to {NUM_LAYERS - 1}",
            ),
        ):
            declared = re.escape(f"eagle_aux_hidden_state_layer_ids={layer_ids}")
            with (
                self.subTest(layer_ids),
                self.assertRaisesRegex(ValueError, f"{declared}.*{reason}"),
            ):
                # where the target resolves its capture, before load_model
                self.resolved(layer_ids, target)


if __name__ == "__main__":
    unittest.main()
