"""EAGLE-3: the target's capture, the drafter's fc and the draft-extend width read one
aux-layer count, from speculative/eagle3_draft_config.py."""

from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=30, suite="stage-a-test-cpu")

import copy
import sys
import unittest
from pathlib import Path
from types import SimpleNamespace

from sglang.srt.models.kimi_k25_eagle3 import _get_eagle_aux_layer_count
from sglang.srt.models.llama_eagle3 import LlamaModel
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle3_draft_config import parse_eagle3_draft_config
from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.test_utils import CustomTestCase

CURRENT_DIR = Path(__file__).resolve().parent
if str(CURRENT_DIR) not in sys.path:
    sys.path.insert(0, str(CURRENT_DIR))

from common import DRAFT, TARGET_HIDDEN_SIZE, DrafterTestCase


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



class TestAuxLayerCountReaders(DrafterTestCase):
    """What the target captures, the width the draft-extend buffers get and the fc of
    both EAGLE-3 drafters, for one drafter config."""

    def _read(self, **draft_keys):
        """Each reader's count (the message where it refuses the drafter)."""
        server_args = self.server_args({**DRAFT, **draft_keys})
        with self.published(server_args):
            draft = self.draft_model_config(server_args)

            def captured():
                self.captured = self.captured_layer_ids(server_args)
                return len(self.captured or [0, 1, 2])

            def extend():
                runner = SimpleNamespace(
                    model_config=draft, spec_algorithm=SpeculativeAlgorithm.EAGLE3
                )
                width = get_draft_input_from_target_hidden_dim(runner)
                return width // TARGET_HIDDEN_SIZE

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
        self.assertEqual(self.captured, [0, 1, 2, 3])
        self.assertEqual(set(counts.values()), {4}, counts)

    def test_layer_ids_in_eagle_config(self):
        counts = self._read(
            eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 3, 4]}
        )
        self.assertEqual(self.captured, [0, 2, 3, 4])
        self.assertEqual(set(counts.values()), {4}, counts)

    def test_no_layer_ids(self):
        counts = self._read()
        self.assertIsNone(self.captured)
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
