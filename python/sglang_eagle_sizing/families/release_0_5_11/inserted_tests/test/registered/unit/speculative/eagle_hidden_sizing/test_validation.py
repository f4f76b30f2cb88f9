"""An EAGLE-3 drafter that cannot consume what its target produces is refused at
start-up, before the draft model loads, with one message naming the cause."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest

from sglang.srt.speculative.eagle_info import validate_eagle_draft_config
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.test.speculative.eagle_hidden_sizing.cases import StartupValidationTestCase
from sglang.test.speculative.eagle_hidden_sizing.common import (
    FOUR_LAYER_EAGLE3,
    NARROW_EAGLE3,
    NO_AUX_EAGLE3,
    WorkerTestCase,
    eagle3,
    llama,
)


class TestStartupValidation(StartupValidationTestCase):
    """validate_eagle_draft_config: a drafter that cannot consume what the target
    produces stops the worker at start-up with one message naming the cause."""

    def test_valid_drafters_pass(self):
        cases = [
            (self.draft(), self.target),
            (self.draft(NO_AUX_EAGLE3), self.target),
            (self.draft(target_hidden_size=256), self.target),
            (self.draft(num_aux_hidden_states=3), self.target),
            (
                self.draft(
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 15, 29]}
                ),
                self.target,
            ),
            (self.draft(NARROW_EAGLE3), self.target),
            (
                self.draft(eagle_aux_hidden_state_layer_ids=[1, 15, 29]),
                self.target,
            ),
        ]
        for draft, target in cases:
            with self.subTest(draft=draft.model_path):
                self.assertIsNone(
                    validate_eagle_draft_config(
                        SpeculativeAlgorithm.EAGLE3, draft, target
                    )
                )

    def test_other_algorithms_are_not_checked(self):
        draft = self.draft(target_hidden_size=512, eagle_config="x")
        for algorithm in (SpeculativeAlgorithm.EAGLE, SpeculativeAlgorithm.STANDALONE):
            with self.subTest(algorithm=algorithm.name):
                self.assertIsNone(
                    validate_eagle_draft_config(algorithm, draft, self.target)
                )

    def test_target_hidden_size_of_another_target(self):
        self.assert_refused(
            self.draft(target_hidden_size=512),
            self.target,
            "target_hidden_size",
            512,
        )
        # A drafter whose architecture is not llama_eagle3's: no fc width to compare,
        # the declared target width alone tells it was trained for another target.
        self.assert_refused(
            self.draft(FOUR_LAYER_EAGLE3, target_hidden_size=128),
            self.target,
            "target_hidden_size",
            128,
        )

    def test_num_aux_hidden_states_disagrees_with_the_capture(self):
        self.assert_refused(
            self.draft(num_aux_hidden_states=4),
            self.target,
            "num_aux_hidden_states",
            4,
            names_target=False,
        )
        self.assert_refused(
            self.draft(
                num_aux_hidden_states=3,
                eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 31]},
            ),
            self.target,
            "num_aux_hidden_states",
            3,
            names_target=False,
        )

    def test_narrow_drafter_without_target_hidden_size(self):
        """A 256-wide drafter for a 512-wide target must say target_hidden_size: its fc
        would take 3 x 256 features while the target produces 3 x 512."""
        message = self.assert_refused(
            self.draft(), self.wide_target, "target_hidden_size", None
        )
        self.assertIn("512", message)

    def test_shallow_target_without_declared_layer_ids(self):
        """Without declared ids the target captures the inputs of its layers
        [2, L // 2, L - 3]: 2, 3, 4 and 5 layers give fewer than 3 distinct layer
        outputs (layer 0's input is the embedding), 7 layers give 3."""
        for num_layers in (2, 3, 4, 5):
            with self.subTest(num_layers=num_layers):
                target = self.folder.model_config(llama(num_hidden_layers=num_layers))
                self.assert_refused(
                    self.draft(),
                    target,
                    "eagle_config.eagle_aux_hidden_state_layer_ids",
                    None,
                )
        shallow = self.folder.model_config(llama(num_hidden_layers=3))
        deep_enough = self.folder.model_config(llama(num_hidden_layers=7))
        for draft, target in (
            (self.draft(), deep_enough),
            (
                self.draft(
                    eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 1, 1]}
                ),
                shallow,
            ),
            (self.draft(NO_AUX_EAGLE3), shallow),
        ):
            with self.subTest(draft=draft.model_path, target=target.model_path):
                self.assertIsNone(
                    validate_eagle_draft_config(
                        SpeculativeAlgorithm.EAGLE3, draft, target
                    )
                )

    def test_parser_refusals_name_the_draft_config(self):
        """A malformed declaration is the drafter's alone, whatever the target."""
        self.assert_refused(
            self.draft(eagle_config={"use_aux_hidden_state": "yes"}),
            self.target,
            "eagle_config.use_aux_hidden_state",
            "yes",
            names_target=False,
        )
        self.assert_refused(
            self.draft(eagle_config={"eagle_aux_hidden_state_layer_ids": []}),
            self.target,
            "eagle_config.eagle_aux_hidden_state_layer_ids",
            [],
            names_target=False,
        )


class TestWorkerStartUp(WorkerTestCase):
    """A drafter refused at start-up is refused by every EAGLE worker, before its
    draft model loads."""

    def test_every_eagle_worker_refuses_before_the_draft_model_loads(self):
        """A drafter trained for a 512-wide target: refused, naming the key and value,
        and no draft model is loaded."""
        draft = eagle3(target_hidden_size=512)
        for cls in (
            EAGLEWorker,
            MultiLayerEagleWorker,
            EAGLEWorkerV2,
            MultiLayerEagleWorkerV2,
        ):
            with self.subTest(worker=cls.__name__):
                del self.workers.loads[:]
                with self.assertRaises(ValueError) as raised:
                    self.start(cls, "EAGLE3", draft)
                self.assertIn("target_hidden_size=512", str(raised.exception))
                self.assertEqual(self.workers.loads, [])


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
