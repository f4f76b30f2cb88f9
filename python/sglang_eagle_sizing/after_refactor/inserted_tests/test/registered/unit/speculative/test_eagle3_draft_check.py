"""The target refuses an EAGLE-3 drafter it cannot feed when it reads the drafter's config,
before any weights load, naming the key."""

from sglang.test.ci.ci_register import register_cpu_ci

register_cpu_ci(est_time=20, suite="stage-a-test-cpu")

import sys
import unittest
from pathlib import Path

CURRENT_DIR = Path(__file__).resolve().parent
if str(CURRENT_DIR) not in sys.path:
    sys.path.insert(0, str(CURRENT_DIR))

from common import DRAFT, TARGET_HIDDEN_SIZE, TARGET_NUM_LAYERS, DrafterTestCase


class TestDraftCheck(DrafterTestCase):
    def _capture(self, **draft_keys):
        draft = {k: v for k, v in {**DRAFT, **draft_keys}.items() if v is not None}
        server_args = self.server_args(draft)
        with self.published(server_args):
            return self.captured_layer_ids(server_args)

    def test_layer_ids_up_to_the_layer_count_are_left_to_the_targets_rule(self):
        # Which hidden state an id names is the target class's rule, checked once the
        # target is built; GPT-OSS captures its last layer's output for id num_layers.
        self.assertEqual(
            self._capture(eagle_aux_hidden_state_layer_ids=[0, TARGET_NUM_LAYERS]),
            [0, TARGET_NUM_LAYERS],
        )

    def test_ids_past_the_layer_count_are_refused(self):
        with self.assertRaisesRegex(
            ValueError,
            rf"eagle_aux_hidden_state_layer_ids=\[1, {TARGET_NUM_LAYERS + 1}\]"
            rf".*up to {TARGET_NUM_LAYERS}: the target has {TARGET_NUM_LAYERS} layers",
        ):
            self._capture(eagle_aux_hidden_state_layer_ids=[1, TARGET_NUM_LAYERS + 1])

    def test_target_hidden_size_must_be_the_targets(self):
        with self.assertRaisesRegex(ValueError, rf"target_hidden_size=64.*{TARGET_HIDDEN_SIZE}"):
            self._capture(target_hidden_size=64)

    def test_without_target_hidden_size_the_drafter_must_be_as_wide_as_the_target(self):
        with self.assertRaisesRegex(ValueError, rf"hidden_size=64.*{TARGET_HIDDEN_SIZE}"):
            self._capture(target_hidden_size=None)
        self.assertIsNone(
            self._capture(target_hidden_size=None, hidden_size=TARGET_HIDDEN_SIZE)
        )

    def test_a_drafter_without_aux_hidden_states_is_not_checked_for_them(self):
        self.assertEqual(
            self._capture(
                eagle_config={"use_aux_hidden_state": False},
                eagle_aux_hidden_state_layer_ids=[TARGET_NUM_LAYERS - 1],
            ),
            [TARGET_NUM_LAYERS - 1],
        )


if __name__ == "__main__":
    unittest.main()
