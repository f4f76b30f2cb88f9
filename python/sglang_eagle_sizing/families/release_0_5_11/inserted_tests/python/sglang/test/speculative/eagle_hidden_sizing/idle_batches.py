"""The batches an idle rank hands the EAGLE workers, and the spec_info each worker
builds for them, read where the draft forward would start."""

from types import SimpleNamespace
from unittest import mock

import torch

from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative import eagle_info_v2
from sglang.srt.speculative.eagle_info import (
    EagleDraftExtendInput,
    EagleDraftInput,
    EagleVerifyInput,
)
from sglang.test.speculative.eagle_hidden_sizing.common import DEFAULT_NUM_AUX, llama


class StopBeforeForward(Exception):
    """Raised where the draft forward would start; carries the batch's spec_info."""

    def __init__(self, spec_info):
        super().__init__()
        self.spec_info = spec_info


class BatchAfterVerify:
    """What ``forward_draft_extend_after_decode`` reads of a ScheduleBatch before it
    builds the draft forward batch (``get_model_worker_batch``, where this stops)."""

    def __init__(self, forward_mode: ForwardMode, spec_info):
        self.forward_mode = forward_mode
        self.spec_info = spec_info
        self.seq_lens = torch.empty(0, dtype=torch.int64)
        self.seq_lens_cpu = torch.empty(0, dtype=torch.int64)
        self.req_pool_indices = torch.empty(0, dtype=torch.int64)
        self.return_logprob = False

    def copy(self) -> "BatchAfterVerify":
        return BatchAfterVerify(self.forward_mode, self.spec_info)

    def prepare_for_idle(self):
        self.forward_mode = ForwardMode.IDLE

    def get_model_worker_batch(self):
        raise StopBeforeForward(self.spec_info)


def verify_idle_output(worker) -> EagleDraftExtendInput:
    """The idle input ``EagleVerifyInput.verify`` makes for an idle batch of the target
    (no worker in reach: it takes the batch's, i.e. the target's, sizes)."""
    verify_input = EagleVerifyInput.__new__(EagleVerifyInput)
    verify_input.topk = worker.topk
    verify_input.spec_steps = worker.speculative_num_steps
    batch = SimpleNamespace(
        forward_mode=ForwardMode.IDLE,
        device="cpu",
        model_config=worker.target_worker.model_config,
    )
    return verify_input.verify(batch, None, None, 1).draft_input


def draft_extend_input(worker, batch: BatchAfterVerify):
    """Run the worker's real ``forward_draft_extend_after_decode``; the spec_info that
    reaches the draft-extend forward."""
    with torch.inference_mode():
        try:
            worker.forward_draft_extend_after_decode(batch)
        except StopBeforeForward as stopped:
            return stopped.spec_info
    raise AssertionError("forward_draft_extend_after_decode did not reach the forward")


def v2_idle_input(worker):
    """Run the real ``forward_batch_generation`` of a v2 worker on a decode batch without
    spec_info (an idle DP-attention rank); the spec_info handed to the draft step."""
    batch = SimpleNamespace(
        forward_mode=ForwardMode.IDLE, is_extend_in_batch=False, spec_info=None
    )

    def draft(model_worker_batch):
        raise StopBeforeForward(model_worker_batch.spec_info)

    with mock.patch.object(worker.draft_worker, "draft", draft):
        try:
            worker.forward_batch_generation(batch)
        except StopBeforeForward as stopped:
            return stopped.spec_info
    raise AssertionError("forward_batch_generation did not reach the draft step")


def v2_draft_extend_idle_input(worker) -> EagleDraftInput:
    """Run the real ``_draft_extend_for_decode`` of a v2 draft worker on an idle batch;
    the spec_info it hands to the draft-extend forward batch."""
    empty = torch.empty((0,), dtype=torch.int64)
    batch = SimpleNamespace(
        forward_mode=ForwardMode.IDLE,
        seq_lens=empty.clone(),
        seq_lens_cpu=empty.clone(),
        seq_lens_sum=0,
        spec_info=None,
    )
    verified = SimpleNamespace(
        logits_output=SimpleNamespace(
            hidden_states=torch.empty(
                (0, DEFAULT_NUM_AUX * llama()["hidden_size"]), dtype=torch.bfloat16
            )
        ),
        accept_lens=empty.clone(),
        next_token_ids=empty.clone(),
    )

    def init_new(model_worker_batch, model_runner):
        raise StopBeforeForward(model_worker_batch.spec_info)

    with mock.patch.object(eagle_info_v2.ForwardBatch, "init_new", init_new):
        try:
            worker.draft_worker._draft_extend_for_decode(batch, verified)
        except StopBeforeForward as stopped:
            return stopped.spec_info
    raise AssertionError("_draft_extend_for_decode did not reach the forward batch")
