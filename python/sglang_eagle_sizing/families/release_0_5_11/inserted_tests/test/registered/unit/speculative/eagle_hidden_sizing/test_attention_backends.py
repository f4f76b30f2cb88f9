"""EAGLE draft attention under DP attention on the real Triton and FlashInfer code paths."""

from sglang.test.ci.ci_register import register_cpu_ci
from sglang.test.test_utils import CustomTestCase, maybe_stub_sgl_kernel

maybe_stub_sgl_kernel()  # before any import that pulls in sgl_kernel

register_cpu_ci(est_time=30, suite="stage-a-test-cpu")

import json
import logging
import os
import subprocess
import sys
import unittest
from types import SimpleNamespace
from typing import Dict
from unittest import mock

import torch

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.radix_attention import RadixAttention
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.speculative.eagle_info import (
    EagleDraftInput,
    get_draft_decode_metadata_batch,
)
from sglang.test.speculative.eagle_hidden_sizing.attention_dp import (
    attention_dp_rank,
    forward_batch,
    triton_runner,
)
from sglang.test.speculative.eagle_hidden_sizing.common import (
    ConfigFolders,
    eagle3,
    llama,
    make_server_args,
)

PADDED_DECODE_SEQ_LEN = 5
#: Runs this file as a module (not its tests) and prints ``padded_decode_results()``.
PADDED_DECODE_IN_A_CHILD = (
    "import json, runpy, sys; "
    "print(json.dumps(runpy.run_path(sys.argv[1])['padded_decode_results']()))"
)


def padded_decode_results() -> Dict[str, object]:
    """Decode attention of a padded draft step on the real ``TritonAttnBackend``, its
    kernels interpreted: this rank holds 1 request, the other rank 2. Runs in a child
    process with ``TRITON_INTERPRET=1`` (see ``TestPaddedDecodeOnTriton``)."""
    seq_len = PADDED_DECODE_SEQ_LEN
    folders = ConfigFolders()
    try:
        server_args = make_server_args(
            folders.write(llama()), folders.write(eagle3()), "EAGLE3"
        )
        config = ModelConfig.from_server_args(server_args)
    finally:
        folders.cleanup()
    torch.manual_seed(0)
    heads, kv_heads = config.num_attention_heads, config.get_num_kv_heads(1)
    dim = config.head_dim
    layer = RadixAttention(heads, dim, dim**-0.5, kv_heads, layer_id=0)
    batch = forward_batch(ForwardMode.DECODE, [seq_len], None, [2, 1])
    even = forward_batch(ForwardMode.DECODE, [seq_len], None, [1, 1])
    q = torch.randn((1, heads * dim))
    k, v = torch.randn((2, 1, kv_heads * dim))
    with attention_dp_rank():
        runner = triton_runner(config, server_args)
        backend = runner.attn_backend
        slots = torch.arange(1, seq_len + 1, dtype=torch.int32)
        runner.req_to_token_pool.req_to_token[1, :seq_len] = slots
        batch.token_to_kv_pool = runner.token_to_kv_pool
        backend.init_forward_metadata(batch)
        unpadded = backend.forward_decode(q, k, v, layer, batch)
        not_padded = get_draft_decode_metadata_batch(even, runner) is even
        # Before the draft steps set their own tokens, the batch holds more rows (every
        # step's cache locations).
        step_ids, step_locs = batch.input_ids, batch.out_cache_loc
        batch.input_ids = torch.zeros((3,), dtype=torch.int64)
        batch.out_cache_loc = torch.arange(3)
        backend.init_forward_metadata(get_draft_decode_metadata_batch(batch, runner))
        batch.input_ids, batch.out_cache_loc = step_ids, step_locs
        kv_indptr = backend.forward_metadata.kv_indptr.tolist()
        rows_before_the_step = batch.batch_size
        batch.prepare_mlp_sync_batch(runner)
        padded_rows = batch.batch_size

        def padded(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x, torch.randn((padded_rows - 1, x.shape[1]))])

        # Uninitialised memory filled with NaN, so that a row left unwritten shows.
        torch.use_deterministic_algorithms(True)
        torch.utils.deterministic.fill_uninitialized_memory = True
        output = backend.forward_decode(padded(q), padded(k), padded(v), layer, batch)
    return {
        "kv_indptr": kv_indptr,
        "rows_before_the_step": rows_before_the_step,
        "padded_rows": padded_rows,
        "not_padded": not_padded,
        "output_rows": output.shape[0],
        "finite": bool(torch.isfinite(output).all()),
        "real_row_as_unpadded": torch.equal(output[:1], unpadded),
    }


class TestPaddedDecodeOnTriton(CustomTestCase):
    """Under DP attention without CUDA graphs each EAGLE draft step's forward pads the
    batch to the other rank's token count, after the metadata of every step was built
    (``EAGLEWorker.draft``). ``get_draft_decode_metadata_batch`` gives the metadata the
    padded batch: this rank holds 1 request, the other 2, and the real
    ``TritonAttnBackend.forward_decode`` attends both rows of the padded query, the real
    one as it does unpadded. Triton interprets its kernels on the CPU only when
    ``TRITON_INTERPRET=1`` is set before they are defined, so the attention runs in a
    child process (``padded_decode_results``)."""

    @classmethod
    def setUpClass(cls):
        result = subprocess.run(
            [sys.executable, "-c", PADDED_DECODE_IN_A_CHILD, __file__],
            env={**os.environ, "TRITON_INTERPRET": "1"},
            capture_output=True,
            text=True,
            timeout=600,
        )
        if result.returncode != 0:
            raise RuntimeError(f"padded decode failed:\n{result.stderr[-3000:]}")
        cls.results = json.loads(result.stdout.splitlines()[-1])

    def test_the_metadata_has_the_rows_of_the_padded_batch(self):
        self.assertEqual(self.results["kv_indptr"][:2], [0, PADDED_DECODE_SEQ_LEN])
        self.assertEqual(
            len(self.results["kv_indptr"]), self.results["padded_rows"] + 1
        )
        self.assertEqual(self.results["padded_rows"], 2)
        self.assertEqual(self.results["rows_before_the_step"], 1)

    def test_a_batch_dp_attention_does_not_pad_is_used_as_it_is(self):
        self.assertTrue(self.results["not_padded"])

    def test_every_row_is_attended_and_the_real_one_as_unpadded(self):
        self.assertEqual(self.results["output_rows"], 2)
        self.assertTrue(self.results["finite"])
        self.assertTrue(self.results["real_row_as_unpadded"])


class TestPaddedIdleBatchOnFlashInfer(CustomTestCase):
    """An idle draft input describes no rows, and DP attention pads its batch to the
    other rank's 2 requests (``seq_lens_cpu`` of 2 rows). FlashInfer's decode planner
    (the real ``FlashInferIndicesUpdaterDecode.call_begin_forward``, its wrapper
    recording the plan) plans the rows the input's ``kv_indptr`` has: none, as no
    attention runs on an idle batch."""

    def test_the_plan_has_the_rows_of_the_idle_input(self):
        from sglang.srt.layers.attention import flashinfer_backend

        idle = EagleDraftInput.create_idle_input(
            device="cpu",
            hidden_size=256,
            dtype=torch.bfloat16,
            topk=1,
            capture_hidden_mode=None,
        )
        planned = []
        wrapper = SimpleNamespace(
            begin_forward=lambda *args, **kw: planned.append(args)
        )
        updater = SimpleNamespace(
            kv_last_page_len=torch.ones((4,), dtype=torch.int32),
            num_qo_heads=4,
            num_kv_heads=2,
            head_dim=64,
            data_type=torch.bfloat16,
            q_data_type=torch.bfloat16,
        )
        padded_rows = 2
        with mock.patch.object(flashinfer_backend, "global_override_indptr_cpu", None):
            flashinfer_backend.FlashInferIndicesUpdaterDecode.call_begin_forward(
                updater,
                wrapper,
                req_pool_indices=torch.zeros((padded_rows,), dtype=torch.int64),
                paged_kernel_lens=torch.ones((padded_rows,), dtype=torch.int32),
                paged_kernel_lens_sum=padded_rows,
                kv_indptr=None,
                kv_start_idx=None,
                spec_info=idle,
                seq_lens_cpu=torch.ones((padded_rows,), dtype=torch.int32),
            )
            self.assertIsNone(flashinfer_backend.global_override_indptr_cpu)
        ((kv_indptr, kv_indices, kv_last_page_len, *_),) = planned
        self.assertEqual(kv_indptr.tolist(), [0])
        self.assertEqual(kv_indices.numel(), 0)
        self.assertEqual(kv_last_page_len.numel(), 0)


if __name__ == "__main__":
    logging.getLogger("sglang").setLevel(logging.ERROR)
    unittest.main()
