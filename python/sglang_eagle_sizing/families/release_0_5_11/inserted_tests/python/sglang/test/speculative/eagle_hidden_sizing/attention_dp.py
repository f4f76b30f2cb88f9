"""Attention on the CPU: the real TritonAttnBackend with its kernels interpreted, on a rank
of two attention-DP ranks. What stands in: the process groups, pinned memory (it needs a
GPU driver) and the KV cache (two tensors, no device pool)."""

import contextlib
from types import SimpleNamespace
from typing import List
from unittest import mock

import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.distributed import parallel_state
from sglang.srt.layers import dp_attention
from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2


@contextlib.contextmanager
def attention_dp_rank(rank: int = 1, size: int = 2):
    """This process is attention-DP rank ``rank`` of ``size``, one attention-TP rank
    each; no collective runs. Restores the globals it sets."""
    one_rank = SimpleNamespace(world_size=1, rank_in_group=0)
    factory = torch.tensor

    def tensor(*args, pin_memory: bool = False, **kwargs):
        return factory(*args, **kwargs)

    wrapper = getattr(dp_attention, "_DpGatheredBufferWrapper", None)
    saved = dict(vars(wrapper)) if wrapper is not None else {}
    with contextlib.ExitStack() as stack:
        for target, name, value in (
            (parallel_state, "_ATTN_TP", one_rank),
            (parallel_state, "_ATTN_CP", one_rank),
            (dp_attention, "_ATTN_DP_RANK", rank),
            (dp_attention, "_ATTN_DP_SIZE", size),
            (dp_attention, "_ENABLE_DP_ATTENTION_FLAG", size > 1),
            (torch, "tensor", tensor),
        ):
            stack.enter_context(mock.patch.object(target, name, value))
        try:
            yield
        finally:
            # the padding's buffer lengths, kept by SGLang per forward
            for name in set(vars(wrapper) if wrapper is not None else ()) - set(saved):
                delattr(wrapper, name)
            for name, value in saved.items():
                if not name.startswith("__") and vars(wrapper).get(name) is not value:
                    setattr(wrapper, name, value)


class KVPoolStandIn:
    """The KV cache of one attention layer: a key and a value tensor."""

    def __init__(self, slots: int, kv_heads: int, head_dim: int):
        self.keys = torch.randn((slots, kv_heads, head_dim))
        self.values = torch.randn((slots, kv_heads, head_dim))

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.keys

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.values

    def set_kv_buffer(self, layer, loc, k, v, *scales):
        self.keys[loc] = k.view(-1, *self.keys.shape[1:])
        self.values[loc] = v.view(-1, *self.values.shape[1:])


def triton_runner(model_config: ModelConfig, server_args: ServerArgs):
    """What ``TritonAttnBackend`` and ``prepare_mlp_sync_batch`` read of a ModelRunner,
    with the real backend built on it (``runner.attn_backend``)."""
    runner = SimpleNamespace(
        model_config=model_config,
        server_args=server_args,
        req_to_token_pool=ReqToTokenPool(
            size=8, max_context_len=64, device="cpu", enable_memory_saver=False
        ),
        token_to_kv_pool=KVPoolStandIn(
            16, model_config.get_num_kv_heads(1), model_config.head_dim
        ),
        token_to_kv_pool_allocator=None,
        sliding_window_size=None,
        hybrid_gdn_config=None,
        kimi_linear_config=None,
        linear_attn_model_spec=None,
        device="cpu",
        gpu_id=0,
        is_draft_worker=False,
    )
    runner.attn_backend = TritonAttnBackend(runner)
    return runner


def forward_batch(
    mode: ForwardMode, seq_lens: List[int], spec_info, global_num_tokens: List[int]
) -> ForwardBatch:
    """A batch of this rank as the scheduler hands it to the model runner (requests in
    pool slots 1, 2, ...), before SGLang pads it to the DP ranks' token counts."""
    lens = torch.tensor(seq_lens, dtype=torch.int64)
    tokens = len(seq_lens)
    return ForwardBatch(
        forward_mode=mode,
        batch_size=tokens,
        input_ids=torch.arange(tokens, dtype=torch.int64),
        req_pool_indices=torch.arange(1, tokens + 1, dtype=torch.int64),
        seq_lens=lens,
        out_cache_loc=lens.clone(),
        seq_lens_sum=int(lens.sum()),
        seq_lens_cpu=lens.clone(),
        positions=lens - 1,
        lora_ids=[None] * tokens,
        spec_info=spec_info,
        global_num_tokens_cpu=list(global_num_tokens),
        global_num_tokens_for_logprob_cpu=list(global_num_tokens),
        global_num_tokens_gpu=torch.zeros((len(global_num_tokens),), dtype=torch.int64),
        is_extend_in_batch=False,
    )


def draft_runner_of(worker):
    """The draft model runner of a v1 worker, a v2 worker or a v2 draft worker."""
    if isinstance(worker, EAGLEWorkerV2):
        worker = worker.draft_worker
    return getattr(worker, "draft_runner", None) or worker.model_runner
