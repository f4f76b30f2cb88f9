"""The multi-layer EAGLE workers' extend buffers: the extend width."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
from sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner import (
    MultiLayerEagleMultiStepDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
from sglang.test.speculative.eagle_hidden_sizing.cases import (
    AttentionBackendStandIn,
    CudaGraphBuffersTestCase,
)
from sglang.test.speculative.eagle_hidden_sizing.common import (
    FOUR_LAYER_EAGLE3,
    HC_DRAFTER,
    HC_TARGET,
    SPEC_STEPS,
    WorkerTestCase,
    expected_sizes,
    llama,
    spec_width,
)
from sglang.test.speculative.eagle_hidden_sizing.idle_batches import (
    BatchAfterVerify,
    draft_extend_input,
    verify_idle_output,
)


class TestIdleInputs(WorkerTestCase):
    """The idle inputs the workers build, read where the draft forward would start. The
    drafter is 128 wide, the target 256 wide, so the decode width (128), the extend width
    (3 x 256) and the target's width (256) all differ. The drafter's config says float16,
    the target's bfloat16: at ``--dtype auto`` the drafter is built in bfloat16."""

    def test_multi_layer_v1_draft_extend_rebuilds_the_input_verify_made(self):
        worker = self.start(MultiLayerEagleWorker, "EAGLE", HC_DRAFTER, HC_TARGET)
        made = verify_idle_output(worker)
        spec_info = draft_extend_input(worker, BatchAfterVerify(ForwardMode.IDLE, made))
        self.assertIsInstance(spec_info, EagleDraftExtendInput)
        self.assertIsNot(spec_info, made)  # MTP: the same sizes, rebuilt all the same
        self.assert_hidden_states(spec_info, spec_width(HC_TARGET), torch.bfloat16)

    def test_multi_layer_v2_hidden_states_pool(self):
        """``req_to_hidden_states_pool`` holds what the MTP layers are fed: the extend
        width, one slot per request and step after the first."""
        worker = self.start(MultiLayerEagleWorkerV2, "EAGLE3", FOUR_LAYER_EAGLE3)
        pool = worker.draft_worker.req_to_hidden_states_pool
        self.assertEqual(tuple(pool.shape), (8, SPEC_STEPS - 1, 4 * 256))
        self.assertEqual(pool.dtype, torch.bfloat16)


class TestCudaGraphBuffers(CudaGraphBuffersTestCase):
    """The hidden-state buffer of each draft CUDA-graph runner, built by the runner's own
    constructor on the CPU; only the graph capture is replaced (and the attention
    backends, as for the workers). Expected sizes come from the config facts."""

    def test_multi_layer_draft_extend_runners(self):
        expected = expected_sizes("EAGLE3", FOUR_LAYER_EAGLE3, llama())["extend"]
        draft_worker = self.start_with_graphs(
            MultiLayerEagleWorkerV2, FOUR_LAYER_EAGLE3
        )
        draft_worker.draft_extend_attn_backend_list = [
            AttentionBackendStandIn() for _ in range(SPEC_STEPS)
        ]
        runners = MultiLayerEagleMultiStepDraftExtendCudaGraphRunner(draft_worker)
        self.assertEqual(len(runners.runners), SPEC_STEPS)
        for step, runner in enumerate(runners.runners):
            with self.subTest(step=step):
                self.assert_buffer(runner.buffers, *expected)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
