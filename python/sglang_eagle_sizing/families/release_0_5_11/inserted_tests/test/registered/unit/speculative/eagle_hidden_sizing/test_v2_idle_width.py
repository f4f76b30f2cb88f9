"""The v2 workers' idle draft input: the draft model's width."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest

import torch

from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
from sglang.test.speculative.eagle_hidden_sizing.common import (
    NARROW_EAGLE3,
    WorkerTestCase,
)
from sglang.test.speculative.eagle_hidden_sizing.idle_batches import v2_idle_input


class TestIdleInputs(WorkerTestCase):
    """The idle inputs the workers build, read where the draft forward would start. The
    drafter is 128 wide, the target 256 wide, so the decode width (128), the extend width
    (3 x 256) and the target's width (256) all differ. The drafter's config says float16,
    the target's bfloat16: at ``--dtype auto`` the drafter is built in bfloat16."""

    def test_v2_worker_without_spec_info(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_hidden_states(v2_idle_input(worker), 128, torch.bfloat16)

    def test_multi_layer_v2_worker_without_spec_info(self):
        worker = self.start(MultiLayerEagleWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_hidden_states(v2_idle_input(worker), 128, torch.bfloat16)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
