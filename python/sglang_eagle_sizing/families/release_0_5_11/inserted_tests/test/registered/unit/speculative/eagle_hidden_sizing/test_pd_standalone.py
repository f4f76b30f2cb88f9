"""The PD metadata buffers of a STANDALONE drafter, and one dtype at every site."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest
from types import SimpleNamespace

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_info import EagleDraftExtendInput, EagleDraftInput
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
from sglang.srt.speculative.standalone_worker import StandaloneWorker
from sglang.srt.speculative.standalone_worker_v2 import StandaloneWorkerV2
from sglang.test.speculative.eagle_hidden_sizing.cases import PDMetadataBuffersTestCase
from sglang.test.speculative.eagle_hidden_sizing.common import (
    STANDALONE_DRAFTER,
    WorkerTestCase,
    eagle3,
)
from sglang.test.speculative.eagle_hidden_sizing.idle_batches import (
    BatchAfterVerify,
    draft_extend_input,
    v2_idle_input,
    verify_idle_output,
)


class TestPDMetadataBuffers(PDMetadataBuffersTestCase):
    """The real ``Scheduler.init_disaggregation`` on a prefill and a decode server with
    the same worker: the hidden-state slot has one size on both (the transfer copies the
    prefill side's item length into the decode side's slot): the draft state's."""

    def test_standalone_v1(self):
        self.check(StandaloneWorker, "STANDALONE", STANDALONE_DRAFTER)

    def test_standalone_v2(self):
        self.check(StandaloneWorkerV2, "STANDALONE", STANDALONE_DRAFTER)


class TestOneDtypeAtDtypeAuto(WorkerTestCase):
    """At ``--dtype auto`` a float16 EAGLE-3 drafter on a bfloat16 target is built in
    bfloat16 (each EAGLE worker decides it at start-up, before the draft model loads):
    every hidden state its sites size has that one dtype."""

    def test_every_site_gets_the_targets_dtype(self):
        v1 = self.start(EAGLEWorker, "EAGLE3", eagle3())
        v2 = self.start(EAGLEWorkerV2, "EAGLE3", eagle3())
        ml_v2 = self.start(MultiLayerEagleWorkerV2, "EAGLE3", eagle3())
        batch = SimpleNamespace(spec_info=None)
        v1._draft_preprocess_idle(batch)
        made = verify_idle_output(v1)
        dtypes = {
            "v1 decode": EagleDraftInput.dtype_for(v1),
            "v1 extend": EagleDraftExtendInput.dtype_for(v1),
            "v2 decode": EagleDraftInput.dtype_for(v2.draft_worker),
            "v2 extend": EagleDraftExtendInput.dtype_for(v2.draft_worker),
            "v1 idle input": batch.spec_info.hidden_states.dtype,
            "v1 extend idle input": draft_extend_input(
                v1, BatchAfterVerify(ForwardMode.IDLE, made)
            ).hidden_states.dtype,
            "v2 idle input": v2_idle_input(v2).hidden_states.dtype,
            "multi-layer v2 pool": ml_v2.draft_worker.req_to_hidden_states_pool.dtype,
        }
        self.assertEqual(dtypes, {site: torch.bfloat16 for site in dtypes})


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
