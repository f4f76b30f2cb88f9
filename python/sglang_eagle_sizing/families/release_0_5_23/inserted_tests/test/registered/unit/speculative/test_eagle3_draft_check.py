"""EAGLE-3: a drafter its target cannot feed is refused when the target reads the
drafter's config, before any weights load, naming the key."""

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
from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle3_draft_config import (
    parse_eagle3_draft_config,
    validate_eagle3_draft_config,
)
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

TARGET = SimpleNamespace(hidden_size=48, num_hidden_layers=6)
LAYER_IDS = "eagle_aux_hidden_state_layer_ids"


def check(**keys):
    keys = {"hidden_size": 64, "target_hidden_size": TARGET.hidden_size, **keys}
    draft = SimpleNamespace(name_or_path="/drafts/eagle3", **keys)
    validate_eagle3_draft_config(
        parse_eagle3_draft_config(draft_hf_config=draft),
        draft_hf_config=draft,
        target_hf_config=TARGET,
    )


class TestDraftCheck(CustomTestCase):
    def test_a_drafter_that_fits_passes(self):
        check()
        check(**{LAYER_IDS: [1, 3, 6]})
        check(eagle_config={LAYER_IDS: [1, 3]}, num_aux_hidden_states=2)
        check(target_hidden_size=None, hidden_size=48)

    def test_num_aux_hidden_states_must_count_the_captured_layers(self):
        # fc and the buffers took 4, the target captured 3 layers.
        for keys in ({}, {LAYER_IDS: [1, 3, 5]}):
            with self.assertRaisesRegex(
                ValueError, "num_aux_hidden_states=4.*expected 3"
            ):
                check(num_aux_hidden_states=4, **keys)

    def test_layer_ids_declared_twice_must_agree(self):
        with self.assertRaisesRegex(ValueError, r"\[1, 5\].*eagle_config.*\[1, 4\]"):
            check(eagle_config={LAYER_IDS: [1, 4]}, **{LAYER_IDS: [1, 5]})

    def test_layer_ids_must_be_a_list_of_layers(self):
        for layer_ids in ([], [1, -2], [1, "5"]):
            with self.assertRaisesRegex(ValueError, LAYER_IDS):
                check(**{LAYER_IDS: layer_ids})

    def test_ids_past_the_target_layers_are_refused(self):
        # Up to num_hidden_layers: what an id names is the target class's rule.
        with self.assertRaisesRegex(ValueError, "up to 6: the target has 6 layers"):
            check(**{LAYER_IDS: [1, 7]})

    def test_the_drafter_must_read_the_targets_width(self):
        with self.assertRaisesRegex(ValueError, "target_hidden_size=64.*48"):
            check(target_hidden_size=64)
        with self.assertRaisesRegex(ValueError, "hidden_size=64.*48"):
            check(target_hidden_size=None)

    def test_a_drafter_without_aux_hidden_states_is_not_checked(self):
        check(eagle_config={"use_aux_hidden_state": False}, num_aux_hidden_states=4)

    def test_the_target_checks_its_drafter_when_it_reads_its_config(self):
        temporary = tempfile.TemporaryDirectory()
        self.addCleanup(temporary.cleanup)
        folder = temporary.name
        llama = {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 48,
            "num_attention_heads": 4,
            "num_hidden_layers": 6,
            "vocab_size": 128,
        }
        draft = {**llama, "architectures": ["LlamaForCausalLMEagle3"]}
        for name, config in (("target", llama), ("draft", draft)):
            os.makedirs(os.path.join(folder, name))
            with open(os.path.join(folder, name, "config.json"), "w") as f:
                json.dump({**config, "num_aux_hidden_states": 4}, f)
        server_args = ServerArgs(
            model_path=os.path.join(folder, "target"),
            device="cpu",
            speculative_algorithm="EAGLE3",
            speculative_draft_model_path=os.path.join(folder, "draft"),
            skip_tokenizer_init=True,
        )
        context = create_context(
            server_args, role="test", ranks=SpawnRanks(world_rank=0)
        )
        with (
            use_context(context),
            self.assertRaisesRegex(ValueError, "num_aux_hidden_states=4"),
        ):
            _resolve_eagle_aux_hidden_state(
                config=SpecAuxHiddenStateConfig(),
                server_args=server_args,
                model_config=ModelConfig.from_server_args(server_args),
                spec_algorithm=SpeculativeAlgorithm.EAGLE3,
                is_draft_worker=False,
            )


if __name__ == "__main__":
    unittest.main()
