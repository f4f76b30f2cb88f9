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

    def test_layer_ids_at_the_top_level(self):
        cases = [
            ("top level only", {"eagle_aux_hidden_state_layer_ids": [1, 23, 44]}, 3),
            ("two at the top level", {"eagle_aux_hidden_state_layer_ids": [1, 44]}, 2),
            (
                "both places, the same layers",
                {
                    "eagle_aux_hidden_state_layer_ids": [2, 30],
                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30]},
                },
                2,
            ),
        ]
        for name, changes, num_aux in cases:
            with self.subTest(name):
                hf_config = self.hf_config(**changes)
                self.assertEqual(
                    get_eagle_aux_hidden_state_layer_ids(hf_config),
                    changes["eagle_aux_hidden_state_layer_ids"],
                )
                self.assertEqual(get_eagle_num_aux_hidden_states(hf_config), num_aux)

    def test_layer_ids_declared_twice_must_agree(self):
        hf_config = self.hf_config(
            eagle_aux_hidden_state_layer_ids=[1, 44],
            eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 23, 44]},
        )
        for function in (
            get_eagle_aux_hidden_state_layer_ids,
            get_eagle_num_aux_hidden_states,
        ):
            with self.subTest(function=function.__name__):
                message = self.assert_refused(
                    lambda: function(hf_config),
                    "eagle_aux_hidden_state_layer_ids",
                    [1, 44],
                    hf_config,
                )
                self.assertIn("[1, 23, 44]", message)

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


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
