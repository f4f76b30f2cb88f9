"""Under DP attention an idle rank verifies too: its draft step returns an idle verify
input, ``prepare_mlp_sync_batch`` pads the idle batch to the rows the ranks agreed on, and
the eager runner initialises the attention metadata of the padded batch
(``EagerRunner._execute_idle``). The idle verify input has no KV layout of its own, so the
attention backend lays the padded batch out from its own rows, as for an idle draft
input."""

import unittest
from types import SimpleNamespace

import torch

from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
from sglang.srt.speculative.eagle_info import EagleDraftInput
from sglang.srt.speculative.eagle_worker_common import build_eagle_verify_input
from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase

register_cpu_ci(est_time=15, suite="base-a-test-cpu")

# The other rank holds 2 requests: the idle batch is padded to 2 rows, each of the
# sequence length a padded row gets (the backend's seq_len fill value, 1).
PADDED_ROWS = 2
FILL_SEQ_LEN = 1
NUM_DRAFT_TOKENS = 4


def idle_verify_input():
    """The verify input the draft step of an idle rank returns (the real
    ``build_eagle_verify_input`` on an idle batch; nothing is drafted)."""
    return build_eagle_verify_input(
        SimpleNamespace(forward_mode=ForwardMode.IDLE),
        EagleDraftInput(),
        None,
        None,
        None,
        None,
        target_worker=None,
        topk=1,
        num_steps=3,
        num_draft_tokens=NUM_DRAFT_TOKENS,
        tree_mask_mode=None,
        device="cpu",
    )


def padded_idle_batch(spec_info):
    """The idle batch as ``prepare_mlp_sync_batch`` pads it: rows of request slot 0 and
    the fill sequence length, one position per verify token."""
    tokens = PADDED_ROWS * NUM_DRAFT_TOKENS
    return ForwardBatch(
        forward_mode=ForwardMode.IDLE,
        batch_size=PADDED_ROWS,
        input_ids=torch.zeros((tokens,), dtype=torch.int64),
        req_pool_indices=torch.zeros((PADDED_ROWS,), dtype=torch.int64),
        seq_lens=torch.full((PADDED_ROWS,), FILL_SEQ_LEN, dtype=torch.int64),
        out_cache_loc=torch.zeros((tokens,), dtype=torch.int64),
        seq_lens_sum=PADDED_ROWS * FILL_SEQ_LEN,
        seq_lens_cpu=torch.full((PADDED_ROWS,), FILL_SEQ_LEN, dtype=torch.int64),
        positions=torch.zeros((tokens,), dtype=torch.int64),
        spec_info=spec_info,
    )


def triton_backend():
    """A ``TritonAttnBackend`` with what its decode/idle metadata reads (the KV pool's
    index translator records the rows it is asked to pack instead of reading a pool)."""
    backend = TritonAttnBackend.__new__(TritonAttnBackend)
    backend.packed = []
    vars(backend).update(
        dllm_attention=None,
        window_kv_indptr=None,
        dcp_size=1,
        sliding_window_size=None,
        use_sliding_window_kv_pool=False,
        max_context_len=64,
        device="cpu",
        kv_indptr=torch.zeros((PADDED_ROWS + 1,), dtype=torch.int32),
        kv_index_translator=SimpleNamespace(
            pack_read_stream=lambda plan, **kwargs: backend.packed.append(kwargs)
        ),
        num_head=4,
        v_head_dim=16,
        swa_v_head_dim=None,
        max_kv_splits=2,
        static_kv_splits=True,
        device_core_count=0,
        enable_deterministic=False,
        lean_total_programs=1,
        lean_block_m=16,
    )
    return backend


class TestIdleVerifyOnTriton(CustomTestCase):
    def test_a_padded_idle_verify_batch_is_laid_out_from_its_rows(self):
        backend = triton_backend()
        backend.init_forward_metadata(padded_idle_batch(idle_verify_input()))
        metadata = backend.forward_metadata
        self.assertEqual(
            metadata.kv_indptr.tolist(),
            [FILL_SEQ_LEN * row for row in range(PADDED_ROWS + 1)],
        )
        (packed,) = backend.packed
        self.assertEqual(packed["req_pool_indices"].tolist(), [0] * PADDED_ROWS)
        self.assertEqual(packed["seq_lens"].tolist(), [FILL_SEQ_LEN] * PADDED_ROWS)
        self.assertEqual(metadata.num_kv_splits.shape, (PADDED_ROWS,))


if __name__ == "__main__":
    unittest.main()
