"""The one parser of an EAGLE-3 drafter's aux hidden-state layer ids and their count."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest
from types import SimpleNamespace

from sglang.srt.speculative.spec_info import (
    get_eagle_aux_hidden_state_layer_ids,
    get_eagle_num_aux_hidden_states,
)
from sglang.test.speculative.eagle_hidden_sizing.cases import EagleConfigParserTestCase
from sglang.test.speculative.eagle_hidden_sizing.common import DEFAULT_NUM_AUX


class TestEagleConfigParser(EagleConfigParserTestCase):
    """The one parser of the drafter's aux hidden-state flag and layer ids."""

    def test_layer_ids_accepted_forms(self):
        cases = [
            ("no eagle_config", {}, None, DEFAULT_NUM_AUX),
            ("eagle_config without ids", {"eagle_config": {}}, None, 3),
            (
                "three ids",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 23, 44]}},
                [1, 23, 44],
                3,
            ),
            (
                "two ids",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30]}},
                [2, 30],
                2,
            ),
            (
                "four ids",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 8, 16, 31]}},
                [1, 8, 16, 31],
                4,
            ),
        ]
        for name, changes, layer_ids, num_aux in cases:
            with self.subTest(name):
                hf_config = self.hf_config(**changes)
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config), layer_ids
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), num_aux)

    def test_top_level_ids_are_hidden_state_indices(self):
        """Ids at the top level are vLLM's key: indices into the target's hidden states
        as transformers' output_hidden_states counts them (k: the output of layer
        k - 1), so SGLang's layer id k - 1."""
        cases = [
            ("three", [2, 24, 45], [1, 23, 44]),
            ("two", [1, 44], [0, 43]),
        ]
        for name, indices, layer_ids in cases:
            with self.subTest(name):
                hf_config = self.hf_config(eagle_aux_hidden_state_layer_ids=indices)
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config), layer_ids
                )
                self.assertEqual(
                    get_eagle_num_aux_hidden_states(hf_config), len(indices)
                )

    def test_eagle_config_comes_first(self):
        """Declared in both places, eagle_config's ids are served (0.5.11's target, its
        draft-extend buffers and fc read eagle_config alone); nothing is refused."""
        hf_config = self.hf_config(
            eagle_aux_hidden_state_layer_ids=[2, 45],
            eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 23, 44]},
        )
        self.assertEqual(get_eagle_aux_hidden_state_layer_ids(hf_config), [1, 23, 44])
        self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), 3)

    def test_num_aux_hidden_states_must_count_the_layers(self):
        cases = [
            ({"num_aux_hidden_states": 4}, 4),
            (
                {
                    "num_aux_hidden_states": 3,
                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 31]},
                },
                3,
            ),
            (
                {
                    "num_aux_hidden_states": 2,
                    "eagle_aux_hidden_state_layer_ids": [1, 2, 3],
                },
                2,
            ),
        ]
        for changes, value in cases:
            with self.subTest(changes=changes):
                hf_config = self.hf_config(**changes)
                self.assert_refused(
                    lambda: get_eagle_num_aux_hidden_states(hf_config),
                    "num_aux_hidden_states",
                    value,
                    hf_config,
                )
        hf_config = self.hf_config(num_aux_hidden_states=3)
        self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), 3)

    def test_layer_ids_from_a_tuple_or_an_object(self):
        hf_config = self.hf_config()
        forms = [
            SimpleNamespace(eagle_aux_hidden_state_layer_ids=(2, 30, 58)),
            {"eagle_aux_hidden_state_layer_ids": (2, 30, 58)},
        ]
        for eagle_config in forms:
            with self.subTest(eagle_config=eagle_config):
                hf_config.eagle_config = eagle_config
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config), [2, 30, 58]
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), 3)

    def test_layer_ids_refused_forms(self):
        for value in ([], [1, "x", 3], [-1, 2, 3], [True, 2, 3], "1,2,3", 3):
            for key, changes in (
                (
                    "eagle_config.eagle_aux_hidden_state_layer_ids",
                    {"eagle_config": {"eagle_aux_hidden_state_layer_ids": value}},
                ),
                (
                    "eagle_aux_hidden_state_layer_ids",
                    {"eagle_aux_hidden_state_layer_ids": value},
                ),
            ):
                with self.subTest(key=key, value=value):
                    hf_config = self.hf_config(**changes)
                    for function in (
                        get_eagle_aux_hidden_state_layer_ids,
                        get_eagle_num_aux_hidden_states,
                    ):
                        self.assert_refused(
                            lambda: function(hf_config), key, value, hf_config
                        )

    def test_top_level_index_0_is_refused(self):
        """Hidden state 0 is the embeddings, which no target captures; in eagle_config
        0 is layer 0's output."""
        hf_config = self.hf_config(eagle_aux_hidden_state_layer_ids=[0, 2, 4])
        message = self.assert_refused(
            lambda: get_eagle_aux_hidden_state_layer_ids(hf_config),
            "eagle_aux_hidden_state_layer_ids",
            [0, 2, 4],
            hf_config,
        )
        self.assertIn("0, the embeddings, is not captured", message)
        hf_config = self.hf_config(
            eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
        )
        self.assertEqual(get_eagle_aux_hidden_state_layer_ids(hf_config), [0, 2, 4])


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
