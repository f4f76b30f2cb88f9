"""EAGLE-3: the target's capture, the drafter's fc and the draft-extend width read one
aux-layer count, from speculative/eagle3_draft_config.py."""

from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=30, suite="stage-a-test-cpu")

import copy
import json
import os
import tempfile
import unittest
from types import SimpleNamespace

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
    SpecAuxHiddenStateConfig,
    _resolve_eagle_aux_hidden_state,
)
from sglang.srt.models.kimi_k25_eagle3 import _get_eagle_aux_layer_count
from sglang.srt.models.llama_eagle3 import LlamaModel
from sglang.srt.runtime_context import (
    SpawnRanks,
    create_context,
    get_parallel,
    use_context,
)
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle3_draft_config import parse_eagle3_draft_config
from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.test_utils import CustomTestCase

TARGET_HIDDEN_SIZE = 48
LLAMA = {
    "model_type": "llama",
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
}
TARGET = {
    **LLAMA,
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": TARGET_HIDDEN_SIZE,
    "num_hidden_layers": 6,
}
DRAFT = {
    **LLAMA,
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 64,
    "num_hidden_layers": 1,
    "target_hidden_size": TARGET_HIDDEN_SIZE,
}


def _config(**keys):
    return SimpleNamespace(name_or_path="draft", **keys)


class TestParseEagle3DraftConfig(CustomTestCase):
    def test_layer_ids_in_eagle_config_or_at_the_top_level(self):
        for config in (
            _config(eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 5, 9, 12]}),
            _config(
                eagle_config=SimpleNamespace(eagle_aux_hidden_state_layer_ids=[1, 5, 9, 12])
            ),
            _config(eagle_aux_hidden_state_layer_ids=[1, 5, 9, 12]),
        ):
            parsed = parse_eagle3_draft_config(draft_hf_config=config)
            self.assertEqual(parsed.aux_hidden_state_layer_ids, [1, 5, 9, 12])
            self.assertEqual(parsed.num_aux_hidden_states, 4)
            self.assertTrue(parsed.use_aux_hidden_state)

    def test_no_layer_ids_means_the_three_default_layers(self):
        parsed = parse_eagle3_draft_config(draft_hf_config=_config())
        self.assertIsNone(parsed.aux_hidden_state_layer_ids)
        self.assertEqual(parsed.num_aux_hidden_states, 3)

    def test_use_aux_hidden_state_false(self):
        config = _config(eagle_config={"use_aux_hidden_state": False})
        parsed = parse_eagle3_draft_config(draft_hf_config=config)
        self.assertFalse(parsed.use_aux_hidden_state)

    def test_layer_ids_declared_twice_must_agree(self):
        config = _config(
            eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 5, 9]},
            eagle_aux_hidden_state_layer_ids=[1, 5, 10],
        )
        with self.assertRaisesRegex(ValueError, "eagle_aux_hidden_state_layer_ids"):
            parse_eagle3_draft_config(draft_hf_config=config)

    def test_num_aux_hidden_states_must_count_the_captured_layers(self):
        for config in (
            _config(num_aux_hidden_states=4),
            _config(eagle_aux_hidden_state_layer_ids=[1, 5, 9], num_aux_hidden_states=4),
        ):
            with self.assertRaisesRegex(ValueError, "num_aux_hidden_states=4"):
                parse_eagle3_draft_config(draft_hf_config=config)

    def test_invalid_layer_ids_are_refused(self):
        for layer_ids in ([], [1, -2], [1, "5"], 3):
            config = _config(eagle_aux_hidden_state_layer_ids=layer_ids)
            with self.assertRaisesRegex(ValueError, "eagle_aux_hidden_state_layer_ids"):
                parse_eagle3_draft_config(draft_hf_config=config)


class TestAuxLayerCountReaders(CustomTestCase):
    """What the target captures, the width the draft-extend buffers get and the fc of
    both EAGLE-3 drafters, for one drafter config."""

    def setUp(self):
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.target = os.path.join(folder.name, "target")
        self.draft = os.path.join(folder.name, "draft")
        self._write(self.target, TARGET)

    def _write(self, path, config):
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(config, f)

    def _read(self, **draft_keys):
        self._write(self.draft, {**DRAFT, **draft_keys})
        server_args = ServerArgs(
            model_path=self.target,
            device="cpu",
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=self.draft,
            skip_tokenizer_init=True,
        )
        context = create_context(server_args, role="test", ranks=SpawnRanks(world_rank=0))
        with use_context(context):
            return self._readers(server_args)

    def _readers(self, server_args):
        """Each reader's count (a ValueError where it refuses the drafter)."""
        draft = ModelConfig.from_server_args(
            server_args, model_path=self.draft, is_draft_model=True
        )

        def captured():
            capture = SpecAuxHiddenStateConfig()
            _resolve_eagle_aux_hidden_state(
                config=capture,
                server_args=server_args,
                model_config=ModelConfig.from_server_args(server_args),
                spec_algorithm=SpeculativeAlgorithm.EAGLE3,
                is_draft_worker=False,
            )
            self.captured_layer_ids = capture.eagle_aux_hidden_state_layer_ids
            return len(self.captured_layer_ids or [0, 1, 2])

        def extend():
            runner = SimpleNamespace(
                model_config=draft, spec_algorithm=SpeculativeAlgorithm.EAGLE3
            )
            return get_draft_input_from_target_hidden_dim(runner) // TARGET_HIDDEN_SIZE

        def llama_fc():
            # fc does not depend on the decoder layers (which need rotary kernels).
            config = copy.deepcopy(draft.hf_config)
            config.num_hidden_layers = 0
            group = SimpleNamespace(rank_in_group=0, world_size=1)
            with get_parallel().override(tp_group=group, attn_tp_group=group):
                return LlamaModel(config).fc.in_features // TARGET_HIDDEN_SIZE

        def kimi_fc():
            return _get_eagle_aux_layer_count(draft.hf_config)

        counts = {}
        for name, read in [
            ("captured", captured),
            ("extend", extend),
            ("llama fc", llama_fc),
            ("kimi fc", kimi_fc),
        ]:
            try:
                counts[name] = read()
            except ValueError as e:
                counts[name] = str(e)
        return counts

    def test_layer_ids_at_the_top_level(self):
        counts = self._read(eagle_aux_hidden_state_layer_ids=[0, 1, 2, 3])
        self.assertEqual(self.captured_layer_ids, [0, 1, 2, 3])
        self.assertEqual(set(counts.values()), {4}, counts)

    def test_layer_ids_in_eagle_config(self):
        counts = self._read(
            eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 4, 5]}
        )
        self.assertEqual(self.captured_layer_ids, [0, 2, 4, 5])
        self.assertEqual(set(counts.values()), {4}, counts)

    def test_no_layer_ids(self):
        counts = self._read()
        self.assertIsNone(self.captured_layer_ids)
        self.assertEqual(set(counts.values()), {3}, counts)

    def test_num_aux_hidden_states_other_than_the_layers_is_refused(self):
        # 0.5.23 built a 4-wide fc and 4-wide buffers, fed 3 captured layers.
        for keys in (
            {"num_aux_hidden_states": 4},
            {"num_aux_hidden_states": 4, "eagle_aux_hidden_state_layer_ids": [0, 2, 4]},
        ):
            for reader, refusal in self._read(**keys).items():
                self.assertIn("num_aux_hidden_states=4", str(refusal), (keys, reader))


if __name__ == "__main__":
    unittest.main()
