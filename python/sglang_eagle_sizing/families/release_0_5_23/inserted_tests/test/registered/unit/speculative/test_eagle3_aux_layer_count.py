"""EAGLE-3: the draft-extend buffers and the fc of both EAGLE-3 drafters (Llama and
Kimi-K2.5) read the number of aux hidden states from parse_eagle3_draft_config."""

import unittest
from types import SimpleNamespace

from transformers import LlamaConfig

from sglang.srt.models.kimi_k25_eagle3 import _get_eagle_aux_layer_count
from sglang.srt.models.llama_eagle3 import LlamaModel
from sglang.srt.runtime_context import get_parallel
from sglang.srt.speculative.eagle3_draft_config import parse_eagle3_draft_config
from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

TARGET_HIDDEN_SIZE = 48
LAYER_IDS = "eagle_aux_hidden_state_layer_ids"


def draft_config(**keys):
    # No decoder layers: fc does not depend on them.
    return LlamaConfig(
        hidden_size=64,
        intermediate_size=96,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=0,
        vocab_size=128,
        target_hidden_size=TARGET_HIDDEN_SIZE,
        **keys,
    )


def counts(config):
    """The number of aux hidden states each reader takes for one drafter config."""
    model_config = SimpleNamespace(
        hf_config=config, hidden_size=64, spec_hidden_size=64
    )
    runner = SimpleNamespace(
        model_config=model_config, spec_algorithm=SpeculativeAlgorithm.EAGLE3
    )
    group = SimpleNamespace(rank_in_group=0, world_size=1)
    with get_parallel().override(
        tp_group=group, attn_tp_group=group, tp_rank=0, tp_size=1
    ):
        llama_fc = LlamaModel(config).fc.in_features
    return {
        "extend": get_draft_input_from_target_hidden_dim(runner) // TARGET_HIDDEN_SIZE,
        "llama fc": llama_fc // TARGET_HIDDEN_SIZE,
        "kimi fc": _get_eagle_aux_layer_count(config),
    }


class TestParseEagle3DraftConfig(CustomTestCase):
    def test_layer_ids_in_eagle_config_or_at_the_top_level(self):
        for config in (
            SimpleNamespace(eagle_config={LAYER_IDS: [1, 5, 9, 12]}),
            SimpleNamespace(eagle_config=SimpleNamespace(**{LAYER_IDS: [1, 5, 9, 12]})),
            SimpleNamespace(**{LAYER_IDS: [1, 5, 9, 12]}),
        ):
            parsed = parse_eagle3_draft_config(draft_hf_config=config)
            self.assertEqual(parsed.num_aux_hidden_states, 4)
            self.assertTrue(parsed.use_aux_hidden_state)

    def test_eagle_config_ids_come_first(self):
        config = SimpleNamespace(eagle_config={LAYER_IDS: [1, 5]}, **{LAYER_IDS: [2]})
        parsed = parse_eagle3_draft_config(draft_hf_config=config)
        self.assertEqual(parsed.aux_hidden_state_layer_ids, [1, 5])

    def test_explicit_count_then_layer_ids_then_the_three_default_layers(self):
        config = SimpleNamespace(num_aux_hidden_states=4)
        self.assertEqual(
            parse_eagle3_draft_config(draft_hf_config=config).num_aux_hidden_states, 4
        )
        parsed = parse_eagle3_draft_config(draft_hf_config=SimpleNamespace())
        self.assertIsNone(parsed.aux_hidden_state_layer_ids)
        self.assertEqual(parsed.num_aux_hidden_states, 3)

    def test_use_aux_hidden_state_false(self):
        config = SimpleNamespace(eagle_config={"use_aux_hidden_state": False})
        parsed = parse_eagle3_draft_config(draft_hf_config=config)
        self.assertFalse(parsed.use_aux_hidden_state)


class TestAuxLayerCountReaders(CustomTestCase):
    def test_layer_ids_in_eagle_config(self):
        config = draft_config(eagle_config={LAYER_IDS: [0, 2, 3, 4]})
        self.assertEqual(set(counts(config).values()), {4})

    def test_layer_ids_at_the_top_level(self):
        # llama_eagle3's fc used to ignore them (3 wide, fed 4 layers).
        config = draft_config(**{LAYER_IDS: [0, 1, 2, 3]})
        self.assertEqual(set(counts(config).values()), {4})

    def test_explicit_num_aux_hidden_states(self):
        # Kimi-K2.5's fc used to ignore it.
        config = draft_config(num_aux_hidden_states=4)
        self.assertEqual(set(counts(config).values()), {4})

    def test_no_layer_ids(self):
        self.assertEqual(set(counts(draft_config()).values()), {3})


if __name__ == "__main__":
    unittest.main()
