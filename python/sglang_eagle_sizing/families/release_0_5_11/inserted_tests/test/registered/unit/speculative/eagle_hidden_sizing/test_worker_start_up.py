"""Each EAGLE worker reads its drafter's aux hidden-state flag and layer count in its own
``__init__``, before the draft model loads."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest
from unittest import mock

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
from sglang.test.speculative.eagle_hidden_sizing.common import (
    FOUR_LAYER_EAGLE3,
    HC_DRAFTER,
    NO_AUX_EAGLE3,
    WorkerTestCase,
    eagle3,
)


class TestWorkerStartUp(WorkerTestCase):
    """Each EAGLE worker reads and checks its drafter in its own ``__init__``, before the
    draft model loads, and keeps what the sizing classmethods read."""

    def assert_parsed(self, worker, use_aux: bool, num_aux: int):
        self.assertIs(worker.eagle_use_aux_hidden_state, use_aux)
        self.assertEqual(worker.eagle_num_aux_hidden_states, num_aux)

    def test_v1_worker_parses_the_drafter(self):
        self.assert_parsed(self.start(EAGLEWorker, "EAGLE3", NO_AUX_EAGLE3), False, 3)

    def test_v2_draft_worker_parses_the_drafter(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NO_AUX_EAGLE3)
        self.assert_parsed(worker.draft_worker, False, 3)

    def test_v2_draft_worker_counts_the_drafters_layers(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", FOUR_LAYER_EAGLE3)
        self.assert_parsed(worker.draft_worker, True, 4)

    def test_multi_layer_v2_draft_worker_counts_the_drafters_layers(self):
        worker = self.start(MultiLayerEagleWorkerV2, "EAGLE3", FOUR_LAYER_EAGLE3)
        self.assert_parsed(worker.draft_worker, True, 4)

    def test_multi_layer_v1_worker_parses_the_drafter(self):
        """MTP (served as EAGLE): no aux hidden states."""
        self.assert_parsed(
            self.start(MultiLayerEagleWorker, "EAGLE", HC_DRAFTER), False, 3
        )

    def test_the_draft_config_is_built_once(self):
        """Each worker builds its drafter's ModelConfig to read it before the draft
        model, and the draft TpModelWorker takes that one: one build, a float16
        drafter built in its bfloat16 target's dtype included."""
        real_init = ModelConfig.__init__
        for cls, algorithm, draft in (
            (EAGLEWorker, "EAGLE3", eagle3()),
            (EAGLEWorkerV2, "EAGLE3", eagle3()),
            (MultiLayerEagleWorker, "EAGLE", HC_DRAFTER),
            (MultiLayerEagleWorkerV2, "EAGLE3", FOUR_LAYER_EAGLE3),
        ):
            builds = []

            def counting_init(config, *args, **kwargs):
                if kwargs.get("is_draft_model"):
                    builds.append(cls.__name__)
                real_init(config, *args, **kwargs)

            with self.subTest(worker=cls.__name__):
                with mock.patch.object(ModelConfig, "__init__", counting_init):
                    self.start(cls, algorithm, draft)
                self.assertEqual(len(builds), 1)

    def test_a_good_drafter_is_loaded_once(self):
        for cls in (EAGLEWorker, EAGLEWorkerV2, MultiLayerEagleWorkerV2):
            with self.subTest(worker=cls.__name__):
                del self.workers.loads[:]
                self.start(cls, "EAGLE3", eagle3())
                self.assertEqual(len(self.workers.loads), 1)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
