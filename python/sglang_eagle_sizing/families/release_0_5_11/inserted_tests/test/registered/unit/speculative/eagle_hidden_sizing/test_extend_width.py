"""The draft-extend hidden states: the target's aux layers the drafter reads, in the
target's width."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import (
    EAGLEDraftExtendCudaGraphRunner,
)
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.standalone_worker import StandaloneWorker
from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2
from sglang.test.speculative.eagle_hidden_sizing.cases import (
    AttentionBackendStandIn,
    CudaGraphBuffersTestCase,
    HiddenSizeContractTestCase,
)
from sglang.test.speculative.eagle_hidden_sizing.common import (
    FOUR_LAYER_EAGLE3,
    HC_DRAFTER,
    HC_TARGET,
    NARROW_EAGLE3,
    NARROW_NO_AUX_EAGLE3,
    NO_AUX_EAGLE3,
    STANDALONE_DRAFTER,
    TOPK,
    WorkerTestCase,
    eagle,
    eagle3,
    expected_sizes,
    llama,
)
from sglang.test.speculative.eagle_hidden_sizing.idle_batches import (
    BatchAfterVerify,
    draft_extend_input,
    verify_idle_output,
)


class TestHiddenSizeContract(HiddenSizeContractTestCase):
    """The classmethods on every real worker a sizing site hands them, against the
    widths and dtypes computed here from the config facts."""

    def test_eagle3_fp16_drafter_on_a_bf16_target(self):
        self.check("EAGLE3", eagle3(), llama())

    def test_eagle3_narrow_drafter(self):
        self.check("EAGLE3", NARROW_EAGLE3, llama())

    def test_eagle3_four_aux_layers(self):
        self.check("EAGLE3", FOUR_LAYER_EAGLE3, llama())

    def test_eagle3_top_level_layer_ids(self):
        self.check(
            "EAGLE3", eagle3(eagle_aux_hidden_state_layer_ids=[1, 3, 5]), llama()
        )

    def test_eagle3_without_aux(self):
        self.check("EAGLE3", NO_AUX_EAGLE3, llama())

    def test_eagle(self):
        self.check("EAGLE", eagle(), llama())

    def test_hyper_connection_pair(self):
        self.check("EAGLE", HC_DRAFTER, HC_TARGET)

    def test_standalone(self):
        expected = expected_sizes("STANDALONE", STANDALONE_DRAFTER, llama())
        v1 = self.start(StandaloneWorker, "STANDALONE", STANDALONE_DRAFTER)
        v2 = self.start(StandaloneWorkerV2, "STANDALONE", STANDALONE_DRAFTER)
        for name, worker in (
            ("StandaloneWorker", v1),
            ("StandaloneDraftWorker", v2.draft_worker),
        ):
            with self.subTest(worker=name):
                self.assert_contract(worker, expected)


class TestIdleInputs(WorkerTestCase):
    """The idle inputs the workers build, read where the draft forward would start. The
    drafter is 128 wide, the target 256 wide, so the decode width (128), the extend width
    (3 x 256) and the target's width (256) all differ. The drafter's config says float16,
    the target's bfloat16: at ``--dtype auto`` the drafter is built in bfloat16."""

    def test_v1_draft_extend_rebuilds_the_input_verify_made(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        made = verify_idle_output(worker)
        self.assert_hidden_states(made, 256, torch.bfloat16)  # the target's sizes
        spec_info = draft_extend_input(worker, BatchAfterVerify(ForwardMode.IDLE, made))
        self.assertIsInstance(spec_info, EagleDraftExtendInput)
        self.assert_hidden_states(spec_info, 3 * 256, torch.bfloat16)

    def test_v1_draft_extend_when_every_request_finished(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        finished = EagleDraftInput.create_idle_input(
            device="cpu",
            hidden_size=1,
            dtype=torch.float32,
            topk=TOPK,
            capture_hidden_mode=None,
        )
        batch = BatchAfterVerify(ForwardMode.DECODE, finished)
        self.assert_hidden_states(
            draft_extend_input(worker, batch), 3 * 256, torch.bfloat16
        )


class TestCudaGraphBuffers(CudaGraphBuffersTestCase):
    """The hidden-state buffer of each draft CUDA-graph runner, built by the runner's own
    constructor on the CPU; only the graph capture is replaced (and the attention
    backends, as for the workers). Expected sizes come from the config facts."""

    def test_draft_extend_runner(self):
        for draft in (FOUR_LAYER_EAGLE3, NARROW_NO_AUX_EAGLE3):
            expected = expected_sizes("EAGLE3", draft, llama())["extend"]
            for cls in (EAGLEWorker, EAGLEWorkerV2):
                with self.subTest(worker=cls.__name__, width=expected[0]):
                    runner = EAGLEDraftExtendCudaGraphRunner(
                        self.start_with_graphs(cls, draft),
                        draft_extend_attn_backend=AttentionBackendStandIn(),
                    )
                    self.assert_buffer(runner.buffers, *expected)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
