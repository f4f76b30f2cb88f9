"""The draft hidden states sized by ``EagleDraftInput.hidden_size_for`` / ``dtype_for``:
the v1 draft idle input, the PD metadata buffers and the draft decode CUDA-graph buffer.
"""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest
from types import SimpleNamespace

import torch

from sglang.srt.speculative.eagle_draft_cuda_graph_runner import (
    EAGLEDraftCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.test.speculative.eagle_hidden_sizing.cases import (
    AttentionBackendStandIn,
    CudaGraphBuffersTestCase,
    PDMetadataBuffersTestCase,
)
from sglang.test.speculative.eagle_hidden_sizing.common import (
    NARROW_EAGLE3,
    NARROW_NO_AUX_EAGLE3,
    WorkerTestCase,
    expected_sizes,
    llama,
)


class TestIdleInputs(WorkerTestCase):
    """The idle inputs the workers build, read where the draft forward would start. The
    drafter is 128 wide, the target 256 wide, so the decode width (128), the extend width
    (3 x 256) and the target's width (256) all differ. The drafter's config says float16,
    the target's bfloat16: at ``--dtype auto`` the drafter is built in bfloat16."""

    def test_v1_draft_step(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        batch = SimpleNamespace(spec_info=None)
        worker._draft_preprocess_idle(batch)
        self.assertIsInstance(batch.spec_info, EagleDraftInput)
        self.assert_hidden_states(batch.spec_info, 128, torch.bfloat16)


class TestPDMetadataBuffers(PDMetadataBuffersTestCase):
    """The real ``Scheduler.init_disaggregation`` on a prefill and a decode server with
    the same worker: the hidden-state slot has one size on both (the transfer copies the
    prefill side's item length into the decode side's slot): the draft state's."""

    def test_eagle3_v1(self):
        self.check(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)

    def test_eagle3_v2(self):
        self.check(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)

    def test_eagle3_narrow_drafter_without_aux_v1(self):
        """The draft-extend width is the target's (256) here, the draft state's 128."""
        self.check(EAGLEWorker, "EAGLE3", NARROW_NO_AUX_EAGLE3)

    def test_eagle3_narrow_drafter_without_aux_v2(self):
        self.check(EAGLEWorkerV2, "EAGLE3", NARROW_NO_AUX_EAGLE3)


class TestCudaGraphBuffers(CudaGraphBuffersTestCase):
    """The hidden-state buffer of each draft CUDA-graph runner, built by the runner's own
    constructor on the CPU; only the graph capture is replaced (and the attention
    backends, as for the workers). Expected sizes come from the config facts."""

    def test_draft_decode_runner(self):
        expected = expected_sizes("EAGLE3", NARROW_EAGLE3, llama())["decode"]
        for cls in (EAGLEWorker, EAGLEWorkerV2):
            with self.subTest(worker=cls.__name__):
                runner = EAGLEDraftCudaGraphRunner(
                    self.start_with_graphs(cls, NARROW_EAGLE3),
                    draft_attn_backend=AttentionBackendStandIn(),
                )
                self.assert_buffer(runner.buffers, *expected)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
