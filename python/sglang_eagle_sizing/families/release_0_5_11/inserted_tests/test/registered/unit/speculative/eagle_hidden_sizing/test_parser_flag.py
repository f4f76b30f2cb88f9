"""The one parser of an EAGLE-3 drafter's aux hidden-state flag (``use_aux_hidden_state``)."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest
from types import SimpleNamespace

from sglang.srt.speculative.spec_info import (
    SpeculativeAlgorithm,
    parse_eagle_use_aux_hidden_state,
)
from sglang.test.speculative.eagle_hidden_sizing.cases import EagleConfigParserTestCase


class TestEagleConfigParser(EagleConfigParserTestCase):
    """The one parser of the drafter's aux hidden-state flag and layer ids."""

    def test_flag_accepted_forms(self):
        cases = [
            ("no eagle_config", {}, True),
            ("eagle_config null", {"eagle_config": None}, True),
            ("empty eagle_config", {"eagle_config": {}}, True),
            ("flag true", {"eagle_config": {"use_aux_hidden_state": True}}, True),
            ("flag false", {"eagle_config": {"use_aux_hidden_state": False}}, False),
            ("flag 1", {"eagle_config": {"use_aux_hidden_state": 1}}, True),
            ("flag 0", {"eagle_config": {"use_aux_hidden_state": 0}}, False),
            ("flag null", {"eagle_config": {"use_aux_hidden_state": None}}, False),
            (
                "layer ids only",
                {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}},
                True,
            ),
        ]
        for name, changes, expected in cases:
            with self.subTest(name):
                hf_config = self.hf_config(**changes)
                self.assertIs(
                    parse_eagle_use_aux_hidden_state(self.eagle3, hf_config), expected
                )

    def test_flag_from_an_eagle_config_object(self):
        hf_config = self.hf_config()
        for flag in (True, False):
            with self.subTest(use_aux_hidden_state=flag):
                hf_config.eagle_config = SimpleNamespace(use_aux_hidden_state=flag)
                self.assertIs(
                    parse_eagle_use_aux_hidden_state(self.eagle3, hf_config), flag
                )

    def test_flag_is_false_unless_eagle3(self):
        """EAGLE, MTP and STANDALONE drafters have no aux hidden states; their
        eagle_config is not read at all."""
        for changes in (
            {},
            {"eagle_config": {"use_aux_hidden_state": True}},
            {"eagle_config": "x"},
        ):
            hf_config = self.hf_config(**changes)
            for algorithm in (
                SpeculativeAlgorithm.EAGLE,
                SpeculativeAlgorithm.STANDALONE,
            ):
                with self.subTest(algorithm=algorithm.name, changes=changes):
                    self.assertIs(
                        parse_eagle_use_aux_hidden_state(algorithm, hf_config), False
                    )

    def test_flag_refused_forms(self):
        cases = [
            ("eagle_config", "aux", {"eagle_config": "aux"}),
            ("eagle_config", [1, 2, 3], {"eagle_config": [1, 2, 3]}),
            ("eagle_config", 1, {"eagle_config": 1}),
            (
                "eagle_config.use_aux_hidden_state",
                "yes",
                {"eagle_config": {"use_aux_hidden_state": "yes"}},
            ),
            (
                "eagle_config.use_aux_hidden_state",
                "false",
                {"eagle_config": {"use_aux_hidden_state": "false"}},
            ),
            (
                "eagle_config.use_aux_hidden_state",
                2,
                {"eagle_config": {"use_aux_hidden_state": 2}},
            ),
        ]
        for key, value, changes in cases:
            with self.subTest(key=key, value=value):
                hf_config = self.hf_config(**changes)
                self.assert_refused(
                    lambda: parse_eagle_use_aux_hidden_state(self.eagle3, hf_config),
                    key,
                    value,
                    hf_config,
                )


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
