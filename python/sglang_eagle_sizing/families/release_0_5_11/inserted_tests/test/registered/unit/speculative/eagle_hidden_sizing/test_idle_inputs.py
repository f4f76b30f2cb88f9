"""The idle inputs of the EAGLE workers carry empty attention indices, and a padded idle
batch's attention metadata on the real Triton backend has no rows."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=15, suite="stage-a-test-cpu")

import logging
import unittest
from types import SimpleNamespace

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_worker import EAGLEWorker
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
from sglang.test.speculative.eagle_hidden_sizing.attention_dp import (
    attention_dp_rank,
    draft_runner_of,
    forward_batch,
    triton_runner,
)
from sglang.test.speculative.eagle_hidden_sizing.common import (
    HC_DRAFTER,
    HC_TARGET,
    NARROW_EAGLE3,
    TOPK,
    WorkerTestCase,
)
from sglang.test.speculative.eagle_hidden_sizing.idle_batches import (
    BatchAfterVerify,
    draft_extend_input,
    v2_draft_extend_idle_input,
    v2_idle_input,
    verify_idle_output,
)


class TestIdleInputsCarryAttentionIndices(WorkerTestCase):
    """Under DP attention a padded idle batch re-initialises the Triton and FlashInfer
    attention metadata from ``spec_info.kv_indptr`` / ``kv_indices``: every idle input a
    worker builds carries empty ones (one zero pointer, no indices) on its device."""

    def assert_empty_indices(self, spec_info):
        self.assertEqual(spec_info.kv_indptr.tolist(), [0])
        self.assertEqual(spec_info.kv_indptr.dtype, torch.int32)
        self.assertEqual(tuple(spec_info.kv_indices.shape), (0,))
        self.assertEqual(spec_info.kv_indices.dtype, torch.int32)
        self.assertEqual(spec_info.kv_indptr.device.type, "cpu")

    def test_v1_draft_step(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        batch = SimpleNamespace(spec_info=None)
        worker._draft_preprocess_idle(batch)
        self.assert_empty_indices(batch.spec_info)

    def test_v1_draft_extend(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        made = verify_idle_output(worker)
        self.assert_empty_indices(made)
        batch = BatchAfterVerify(ForwardMode.IDLE, made)
        self.assert_empty_indices(draft_extend_input(worker, batch))

    def test_multi_layer_v1_draft_extend(self):
        worker = self.start(MultiLayerEagleWorker, "EAGLE", HC_DRAFTER, HC_TARGET)
        batch = BatchAfterVerify(ForwardMode.IDLE, verify_idle_output(worker))
        self.assert_empty_indices(draft_extend_input(worker, batch))

    def test_v2_worker_without_spec_info(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_empty_indices(v2_idle_input(worker))

    def test_multi_layer_v2_worker_without_spec_info(self):
        worker = self.start(MultiLayerEagleWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_empty_indices(v2_idle_input(worker))


class TestPaddedIdleBatchOnTriton(WorkerTestCase):
    """Under DP attention an idle rank runs the busy rank's token count: SGLang pads its
    batch (``prepare_mlp_sync_batch``) and, the padded batch being non-empty,
    re-initialises the attention metadata from the idle input (``forward_idle``). The
    real Triton backend's metadata of each idle input: no rows, no KV indices."""

    #: the busy rank's requests
    BUSY_REQUESTS = 3

    def assert_no_rows(self, worker, spec_info):
        busy_tokens = self.BUSY_REQUESTS * spec_info.num_tokens_per_req
        batch = forward_batch(ForwardMode.IDLE, [], spec_info, [busy_tokens, 0])
        with attention_dp_rank():
            runner = triton_runner(
                draft_runner_of(worker).model_config, worker.server_args
            )
            batch.prepare_mlp_sync_batch(runner)
            self.assertEqual(batch.batch_size, self.BUSY_REQUESTS)  # padded
            runner.attn_backend.init_forward_metadata(batch)
        metadata = runner.attn_backend.forward_metadata
        self.assertEqual(metadata.kv_indptr.tolist(), [0])
        self.assertEqual(tuple(metadata.kv_indices.shape), (0,))
        self.assertEqual(metadata.attn_logits.shape[0], 0)
        self.assertEqual(tuple(metadata.num_kv_splits.shape), (0,))

    def test_v1_draft_step(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        batch = SimpleNamespace(spec_info=None)
        worker._draft_preprocess_idle(batch)
        batch.spec_info.num_tokens_per_req = TOPK  # draft() sets it next
        self.assert_no_rows(worker, batch.spec_info)

    def test_v1_draft_extend(self):
        worker = self.start(EAGLEWorker, "EAGLE3", NARROW_EAGLE3)
        batch = BatchAfterVerify(ForwardMode.IDLE, verify_idle_output(worker))
        self.assert_no_rows(worker, draft_extend_input(worker, batch))

    def test_v2_worker_without_spec_info(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)
        spec_info = v2_idle_input(worker)
        spec_info.num_tokens_per_req = TOPK  # the draft worker's draft() sets it
        self.assert_no_rows(worker, spec_info)

    def test_v2_draft_extend(self):
        worker = self.start(EAGLEWorkerV2, "EAGLE3", NARROW_EAGLE3)
        self.assert_no_rows(worker, v2_draft_extend_idle_input(worker))


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
