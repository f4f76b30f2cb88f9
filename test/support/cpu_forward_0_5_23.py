"""One sequence through an SGLang 0.5.23-family model's real forward on the CPU, for the probes
that run in ``.venv-0.5.23`` (``capture_probe_0_5_23.py``, ``speculators_oracle_probe_0_5_23.py``):
``RadixAttention`` on ``TorchNativeAttnBackend`` with a real ``MHATokenToKVPool`` /
``ReqToTokenPool``, published as ``ModelRunner`` publishes them around a forward.

What stands in: the parallel groups (one tensor-, attention- and pipeline-parallel rank, no
process group) and RoPE's CPU flag (its native path). Import it after
``maybe_stub_sgl_kernel()``.
"""

import contextlib
from types import SimpleNamespace
from unittest import mock

import torch

from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.rotary_embedding import base as rotary_embedding_base
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch
from sglang.srt.model_executor.forward_context import ForwardContext, forward_context
from sglang.srt.model_executor.runner_utils.forward_batch import set_forward_batch
from sglang.srt.runtime_context import get_parallel


@contextlib.contextmanager
def one_cpu_rank():
    """One tensor-, attention- and pipeline-parallel rank without a process group, and RoPE's
    CPU path. Restores what it sets."""
    group = SimpleNamespace(
        world_size=1, rank_in_group=0, rank=0, local_rank=0, is_first_rank=True,
        is_last_rank=True,
    )
    with contextlib.ExitStack() as stack:
        stack.enter_context(get_parallel().override(
            tp_group=group, attn_tp_group=group, pp_group=group, tp_rank=0, tp_size=1,
            attn_tp_rank=0, attn_tp_size=1,
        ))
        stack.enter_context(mock.patch.object(rotary_embedding_base, "_is_cpu", True))
        yield


def forward_one_sequence(model, input_ids, mode, *, kv_heads, head_dim, layers, spec_info=None):
    """``model.forward`` on ``input_ids``, all new tokens of one request (no prefix), with
    ``CaptureHiddenMode.FULL``: (its output, the KV pool it wrote)."""
    n = input_ids.shape[0]
    kv_pool = MHATokenToKVPool(
        size=64, page_size=1, dtype=torch.float32, head_num=kv_heads, head_dim=head_dim,
        layer_num=layers, device="cpu", enable_memory_saver=False,
    )
    req_pool = ReqToTokenPool(size=2, max_context_len=64, device="cpu", enable_memory_saver=False)
    slots = torch.arange(1, n + 1)  # slot 0 is SGLang's padding slot
    req_pool.write((1, slice(0, n)), slots.to(torch.int32))
    runner = SimpleNamespace(device="cpu", req_to_token_pool=req_pool, token_to_kv_pool=kv_pool)
    batch = ForwardBatch(
        forward_mode=mode,
        batch_size=1,
        input_ids=input_ids,
        req_pool_indices=torch.tensor([1]),
        seq_lens=torch.tensor([n]),
        out_cache_loc=slots,
        seq_lens_sum=n,
        seq_lens_cpu=torch.tensor([n]),
        positions=torch.arange(n),
        extend_num_tokens=n,
        extend_prefix_lens=torch.tensor([0]),
        extend_seq_lens=torch.tensor([n]),
        extend_prefix_lens_cpu=[0],
        extend_seq_lens_cpu=[n],
        spec_info=spec_info,
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_logprob=False,
    )
    backend = TorchNativeAttnBackend(runner)
    with (
        one_cpu_rank(),
        torch.no_grad(),
        forward_context(ForwardContext(attn_backend=backend), forward_batch=batch),
        set_forward_batch(batch),
    ):
        backend.init_forward_metadata(batch)
        output = model.forward(input_ids, batch.positions, batch)
    return output, kv_pool
