"""At ``--dtype auto`` an EAGLE drafter is built in its target's dtype."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest

import torch

from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2
from sglang.test.speculative.eagle_hidden_sizing.common import (
    STANDALONE_DRAFTER,
    WorkerTestCase,
    eagle3,
)


class TestOneDtypeAtDtypeAuto(WorkerTestCase):
    """At ``--dtype auto`` a float16 EAGLE-3 drafter on a bfloat16 target is built in
    bfloat16 (each EAGLE worker decides it at start-up, before the draft model loads):
    every hidden state its sites size has that one dtype."""

    def test_the_draft_model_config_takes_the_targets_dtype(self):
        for cls in (EAGLEWorker, EAGLEWorkerV2, MultiLayerEagleWorkerV2):
            with self.subTest(worker=cls.__name__):
                worker = self.start(cls, "EAGLE3", eagle3())
                draft = worker if cls is EAGLEWorker else worker.draft_worker
                runners = getattr(draft, "draft_runner_list", None) or [
                    draft.draft_runner if cls is not EAGLEWorker else draft.model_runner
                ]
                for runner in runners:
                    self.assertEqual(runner.model_config.dtype, torch.bfloat16)

    def test_an_explicit_dtype_is_kept(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", eagle3(), dtype="float16")
        self.assertEqual(worker.target_worker.model_config.dtype, torch.float16)
        draft_config = worker.draft_worker.draft_runner.model_config
        self.assertEqual(draft_config.dtype, torch.float16)

    def test_a_standalone_drafter_keeps_its_own(self):
        """A STANDALONE drafter does not read the target's hidden states."""
        worker = self.start(StandaloneWorkerV2, "STANDALONE", STANDALONE_DRAFTER)
        draft_config = worker.draft_worker.draft_runner.model_config
        self.assertEqual(draft_config.dtype, torch.float16)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
