"""A decode batch padded after its attention metadata was built, on SGLang's real Triton
decode attention, on the CPU (Triton's interpreter).

Runs inside one SGLang tree (pristine 0.5.11 or patched, first on sys.path). Usage:

    python padded_decode_probe.py TARGET_CONFIG_DIR

What the EAGLE draft steps do under DP attention without CUDA graphs, on a rank with fewer
requests than the other (``EAGLEWorker.draft``: metadata first, then each step's
``ModelRunner.forward`` pads): the real ``TritonAttnBackend.init_forward_metadata`` on this
rank's decode batch (1 request; in a patched tree, on ``get_draft_decode_metadata_batch``
of it, as the patched draft builds it), the real ``ForwardBatch.prepare_mlp_sync_batch`` with
``global_num_tokens = [2, 1]`` (the other rank holds 2; SGLang picks MAX_LEN padding, so this
batch becomes 2 rows), then the real ``TritonAttnBackend.forward_decode`` (and its Triton
kernels, interpreted) on the padded query. The same query unpadded, on the same metadata, is
the reference. Prints JSON.

Stands in: the process groups (as in idle_attention_probe.py), ``pin_memory``, and the KV pool
(two tensors and the one write ``forward_decode`` makes; the real pool allocates per layer on
a device); the layer is the attributes of a ``RadixAttention`` the backend reads.
"""

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: kernels run on CPU tensors

import json
import sys
import traceback
from types import SimpleNamespace

from idle_attention_probe import make_runner, set_up_dp_attention, without_pinned_memory

#: tokens already in this rank's one request, and its KV slots (slot 0 is SGLang's padding)
SEQ_LEN = 5
BUSY_ELSEWHERE = 2


def main():
    import sglang
    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    out = {"sglang_file": sglang.__file__}
    torch.manual_seed(0)
    set_up_dp_attention()
    config = ModelConfig(sys.argv[1])
    runner = make_runner(config)
    backend = runner.attn_backend
    heads, kv_heads, dim = config.num_attention_heads, config.get_num_kv_heads(1), config.head_dim
    slots = 16
    keys = torch.randn((slots, kv_heads, dim))
    values = torch.randn((slots, kv_heads, dim))

    def set_kv_buffer(layer, loc, k, v, *scales):
        keys[loc] = k.view(-1, kv_heads, dim)
        values[loc] = v.view(-1, kv_heads, dim)

    pool = SimpleNamespace(
        get_key_buffer=lambda layer_id: keys,
        get_value_buffer=lambda layer_id: values,
        set_kv_buffer=set_kv_buffer,
    )
    runner.req_to_token_pool.req_to_token[1, :SEQ_LEN] = torch.arange(1, SEQ_LEN + 1)
    layer = SimpleNamespace(
        layer_id=0,
        tp_q_head_num=heads,
        tp_k_head_num=kv_heads,
        tp_v_head_num=kv_heads,
        qk_head_dim=dim,
        v_head_dim=dim,
        scaling=dim**-0.5,
        logit_cap=0.0,
        logit_capping_method="tanh",
        sliding_window_size=None,
        k_scale=None,
        v_scale=None,
        xai_temperature_len=-1,
    )
    batch = ForwardBatch(
        forward_mode=ForwardMode.DECODE,
        batch_size=1,
        input_ids=torch.tensor([7]),
        req_pool_indices=torch.tensor([1]),
        seq_lens=torch.tensor([SEQ_LEN]),
        out_cache_loc=torch.tensor([SEQ_LEN]),
        seq_lens_sum=SEQ_LEN,
        seq_lens_cpu=torch.tensor([SEQ_LEN]),
        positions=torch.tensor([SEQ_LEN - 1]),
        lora_ids=[None],
        spec_info=None,
        global_num_tokens_cpu=[BUSY_ELSEWHERE, 1],
        global_num_tokens_for_logprob_cpu=[BUSY_ELSEWHERE, 1],
        global_num_tokens_gpu=torch.zeros((2,), dtype=torch.int64),
        is_extend_in_batch=False,
    )
    batch.token_to_kv_pool = pool
    backend.init_forward_metadata(batch)
    out["kv_indptr"] = backend.forward_metadata.kv_indptr.tolist()

    q = torch.randn((1, heads * dim))
    k = torch.randn((1, kv_heads * dim))
    v = torch.randn((1, kv_heads * dim))
    reference = backend.forward_decode(q, k, v, layer, batch)

    # What EAGLEWorker.draft builds the steps' metadata for: the batch as it is in the
    # release, the batch DP attention will pad in a tree that has the patch's helper.
    from sglang.srt.speculative import eagle_info

    helper = getattr(eagle_info, "get_draft_decode_metadata_batch", None)
    out["draft_metadata_helper"] = helper is not None
    with without_pinned_memory():
        backend.init_forward_metadata(batch if helper is None else helper(batch, runner))
    out["draft_kv_indptr"] = backend.forward_metadata.kv_indptr.tolist()
    out["batch_size_after_the_metadata"] = batch.batch_size

    with without_pinned_memory():
        batch.prepare_mlp_sync_batch(runner)
    out["padding"] = batch.dp_padding_mode.name
    out["padded_batch_size"] = batch.batch_size
    rows = batch.input_ids.shape[0]

    def padded(x):
        return torch.cat([x, torch.randn((rows - x.shape[0], x.shape[1]))])

    try:
        o = backend.forward_decode(padded(q), padded(k), padded(v), layer, batch)
    except Exception as exc:  # reported, asserted by the test
        out["outcome"] = "error"
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["where"] = traceback.extract_tb(exc.__traceback__)[-1].filename.rsplit("/srt/", 1)[-1]
    else:
        out["outcome"] = "ok"
        out["output_rows"] = o.shape[0]
        out["real_row_max_difference"] = (o[:1] - reference).abs().max().item()
        out["finite"] = bool(torch.isfinite(o).all())
    print("PROBE-JSON " + json.dumps(out))


if __name__ == "__main__":
    main()
