"""One request's new tokens (no prefix) as SGLang's pools and ``ForwardBatch`` hold them on the
CPU: what the probes of both release families run a model's real forward on
(``speculators_oracle_probe.py`` for 0.5.11, ``cpu_forward_0_5_23.py`` for 0.5.23). Import it
after ``maybe_stub_sgl_kernel()``."""

import torch
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch


def one_sequence_batch(input_ids, mode, *, kv_heads, head_dim, layers, pools_in_batch, **fields):
    """(the ``ForwardBatch`` of ``input_ids`` as one request's new tokens, capturing every
    hidden state (``CaptureHiddenMode.FULL``), its ``ReqToTokenPool``, its
    ``MHATokenToKVPool``). ``pools_in_batch``: the batch holds the pools (0.5.11; 0.5.23
    publishes them on the runner instead); ``fields``: more of the batch's fields."""
    n = input_ids.shape[0]
    kv_pool = MHATokenToKVPool(
        size=64, page_size=1, dtype=torch.float32, head_num=kv_heads, head_dim=head_dim,
        layer_num=layers, device="cpu", enable_memory_saver=False,
    )
    req_pool = ReqToTokenPool(size=2, max_context_len=64, device="cpu", enable_memory_saver=False)
    slots = torch.arange(1, n + 1)  # slot 0 is SGLang's padding slot
    req_pool.write((1, slice(0, n)), slots.to(torch.int32))
    if pools_in_batch:
        fields.update(req_to_token_pool=req_pool, token_to_kv_pool=kv_pool)
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
        capture_hidden_mode=CaptureHiddenMode.FULL,
        return_logprob=False,
        **fields,
    )
    return batch, req_pool, kv_pool
