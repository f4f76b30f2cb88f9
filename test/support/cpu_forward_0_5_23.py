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
from one_sequence import one_sequence_batch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.layers.rotary_embedding import base as rotary_embedding_base
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
    batch, req_pool, kv_pool = one_sequence_batch(
        input_ids, mode, kv_heads=kv_heads, head_dim=head_dim, layers=layers,
        pools_in_batch=False, spec_info=spec_info,
    )
    runner = SimpleNamespace(device="cpu", req_to_token_pool=req_pool, token_to_kv_pool=kv_pool)
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
