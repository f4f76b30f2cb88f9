"""Padded idle batches on SGLang's real Triton (and FlashInfer) metadata paths, on the CPU.

Runs inside one SGLang tree (pristine 0.5.11 or patched, first on sys.path), in one process
(importing the worker modules costs ~20 s). Usage:

    python idle_attention_probe.py DRAFT_CONFIG_DIR TARGET_CONFIG_DIR

For each kind of idle input the EAGLE workers build, it builds one through the worker's own
method, then runs what an idle DP-attention rank runs with it: the real
``ForwardBatch.prepare_mlp_sync_batch`` (SGLang's own padding choice for
``global_num_tokens = [tokens of the busy rank, 0]``, this rank being the idle one) and the
real ``ModelRunner.forward_idle``, which initialises ``TritonAttnBackend``'s metadata; then
the real ``FlashInferAttnBackend.init_forward_metadata`` on the same padded batch, up to its
planner. Prints JSON.

What is real: the tree's worker methods and idle inputs, ``ForwardBatch`` and its padding,
``DpPaddingMode``, ``ModelRunner.forward_idle``, ``TritonAttnBackend`` (constructor and
``init_forward_metadata``) with the target's real ``ModelConfig``. What stands in:

- the process groups: two attention-DP ranks of one attention-TP rank each (module globals of
  ``parallel_state`` / ``dp_attention``); no collective runs;
- devices: ``pin_memory=True`` is dropped (pinned memory needs a CUDA driver), and in a tree
  whose ``EagleVerifyInput.create_idle_input`` hard-codes ``device="cuda"`` that method is run
  with its tensors made on the CPU, so that what the backend reads of it is what is tested;
- the model (no weights): ``forward_idle`` calls it after the metadata; it records the call;
- FlashInfer's planner (``begin_forward``, a CUDA kernel) records its arguments, and the
  decode updater is given the attributes its ``__init__`` would set (that one allocates
  flashinfer workspaces on the GPU);
- worker objects: made with ``__new__`` and given the attributes their methods read; each
  method is stopped at the call that would run a forward (``StopBeforeForward``).

No Triton kernel runs: on a padded idle batch with these inputs ``init_forward_metadata``
only builds tensors (the CPU has no device core count, so the split count is a fill).
"""

import contextlib
import inspect
import json
import sys
import traceback
from types import SimpleNamespace

from probe_patched import empty_idle_batch

#: topk, draft steps, draft tokens (SGLang's chain defaults for a small target)
TOPK, STEPS, DRAFT_TOKENS = 1, 3, 4
#: requests on the busy rank: its token count decides the idle rank's padded batch size
BUSY_REQUESTS = (1, 3)


class StopBeforeForward(Exception):
    pass


def stop(*args, **kwargs):
    raise StopBeforeForward


def set_up_dp_attention():
    """Two attention-DP ranks, this process being rank 1 (the idle one)."""
    from sglang.srt.distributed import parallel_state
    from sglang.srt.layers import dp_attention

    parallel_state._ATTN_TP = SimpleNamespace(world_size=1, rank_in_group=0)
    parallel_state._ATTN_CP = SimpleNamespace(world_size=1, rank_in_group=0)
    dp_attention._ATTN_DP_RANK = 1
    dp_attention._ATTN_DP_SIZE = 2
    dp_attention._ENABLE_DP_ATTENTION_FLAG = True


@contextlib.contextmanager
def without_pinned_memory():
    import torch

    factory = torch.tensor

    def tensor(*args, pin_memory=False, **kwargs):
        return factory(*args, **kwargs)

    torch.tensor = tensor
    try:
        yield
    finally:
        torch.tensor = factory


@contextlib.contextmanager
def cuda_made_on_cpu(module):
    """Run code of ``module`` whose tensors name ``device="cuda"`` with them on the CPU."""
    real = module.torch

    class Torch:
        def __getattr__(self, name):
            value = getattr(real, name)
            if name in ("empty", "full", "zeros", "ones", "arange", "tensor"):

                def made(*args, **kwargs):
                    if kwargs.get("device") == "cuda":
                        kwargs["device"] = "cpu"
                    return value(*args, **kwargs)

                return made
            return value

    module.torch = Torch()
    try:
        yield
    finally:
        module.torch = real


def make_runner(target_config):
    """What ``TritonAttnBackend`` and ``forward_idle`` read of a ``ModelRunner``."""
    import torch
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend
    from sglang.srt.model_executor.model_runner import ModelRunner

    head_dim = target_config.head_dim
    num_kv_heads = target_config.get_num_kv_heads(1)
    server_args = SimpleNamespace(
        speculative_num_draft_tokens=DRAFT_TOKENS,
        speculative_num_steps=STEPS,
        triton_attention_num_kv_splits=8,
        disable_cuda_graph=True,
        chunked_prefill_size=-1,
        enable_deterministic_inference=False,
        triton_attention_split_tile_size=None,
    )
    value_buffer = torch.empty((16, num_kv_heads, head_dim))
    runner = SimpleNamespace(
        req_to_token_pool=SimpleNamespace(size=8, req_to_token=torch.zeros((8, 64), dtype=torch.int32)),
        sliding_window_size=None,
        token_to_kv_pool_allocator=None,
        token_to_kv_pool=SimpleNamespace(get_value_buffer=lambda layer_id: value_buffer),
        server_args=server_args,
        model_config=target_config,
        hybrid_gdn_config=None,
        kimi_linear_config=None,
        linear_attn_model_spec=None,
        device="cpu",
        gpu_id=0,
        is_draft_worker=False,
        support_pp=False,
        device_timer=None,
    )
    runner.attn_backend = TritonAttnBackend(runner)
    runner.model_calls = []

    def model_forward(input_ids, positions, forward_batch, **kwargs):
        runner.model_calls.append(len(input_ids))
        return "model output"

    runner.model = SimpleNamespace(forward=model_forward)
    runner.forward_idle = ModelRunner.forward_idle.__get__(runner)
    return runner


def make_flashinfer(runner):
    """FlashInfer's decode path with its planner (a CUDA kernel) recording what it is given:
    the real ``FlashInferAttnBackend.init_forward_metadata`` and
    ``FlashInferIndicesUpdaterDecode``, whose ``__init__`` (flashinfer workspaces on the
    GPU) is replaced by the attributes it sets."""
    import torch
    from sglang.srt.layers.attention import flashinfer_backend
    from sglang.srt.layers.attention.flashinfer_backend import (
        FlashInferAttnBackend,
        FlashInferIndicesUpdaterDecode,
    )

    config = runner.model_config
    max_bs = runner.req_to_token_pool.size
    updater = FlashInferIndicesUpdaterDecode.__new__(FlashInferIndicesUpdaterDecode)
    updater.num_qo_heads = config.num_attention_heads
    updater.num_kv_heads = config.get_num_kv_heads(1)
    updater.head_dim = config.head_dim
    updater.data_type = updater.q_data_type = config.dtype
    updater.sliding_window_size = None
    updater.attn_backend = None
    updater.kv_indptr = [torch.zeros((max_bs + 1,), dtype=torch.int32)]
    updater.kv_last_page_len = torch.ones((max_bs,), dtype=torch.int32)
    updater.req_to_token = runner.req_to_token_pool.req_to_token
    updater.token_to_kv_pool_allocator = None
    updater.update = updater.update_single_wrapper
    plans = []

    def begin_forward(indptr, indices, last_page_len, *args, **kwargs):
        override = flashinfer_backend.global_override_indptr_cpu
        plans.append(
            {
                "kv_indptr": indptr.tolist(),
                "kv_indices": len(indices),
                "last_page_len_rows": len(last_page_len),
                "indptr_cpu": None if override is None else override.tolist(),
            }
        )

    wrapper = SimpleNamespace(begin_forward=begin_forward, is_cuda_graph_enabled=False)
    backend = SimpleNamespace(
        indices_updater_decode=updater, decode_wrappers=[wrapper], decode_split_tile_size=None
    )
    def init_forward_metadata(batch):
        # a call that raised leaves the module's override set: each batch starts clean
        flashinfer_backend.global_override_indptr_cpu = None
        FlashInferAttnBackend.init_forward_metadata(backend, batch)

    return init_forward_metadata, plans


def idle_forward_batch(spec_info, busy_requests):
    """An idle rank's ForwardBatch as the scheduler hands it over: no requests, the busy
    rank's token count in ``global_num_tokens``."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    empty = torch.empty((0,), dtype=torch.int64)
    busy_tokens = busy_requests * spec_info.num_tokens_per_req
    return ForwardBatch(
        forward_mode=ForwardMode.IDLE,
        batch_size=0,
        input_ids=empty.clone(),
        req_pool_indices=empty.clone(),
        seq_lens=empty.clone(),
        out_cache_loc=empty.clone(),
        seq_lens_sum=0,
        seq_lens_cpu=empty.clone(),
        positions=empty.clone(),
        lora_ids=[],
        spec_info=spec_info,
        global_num_tokens_cpu=[busy_tokens, 0],
        global_num_tokens_for_logprob_cpu=[busy_requests, 0],
        global_num_tokens_gpu=torch.zeros((2,), dtype=torch.int64),
        is_extend_in_batch=False,
    )


def run_idle_batch(runner, spec_info, busy_requests):
    """prepare_mlp_sync_batch + forward_idle, as ModelRunner._forward_raw runs them."""
    batch = idle_forward_batch(spec_info, busy_requests)
    row = {"busy_requests": busy_requests, "num_tokens_per_req": spec_info.num_tokens_per_req}
    with without_pinned_memory():
        batch.prepare_mlp_sync_batch(runner)
    row["padding"] = batch.dp_padding_mode.name
    row["padded_batch_size"] = batch.batch_size
    del runner.model_calls[:]
    runner.attn_backend.forward_metadata = None
    try:
        runner.forward_idle(batch)
        row["outcome"] = "ok"
    except Exception as exc:  # reported, asserted by the test
        row["outcome"] = "error"
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["where"] = traceback.extract_tb(exc.__traceback__)[-1].filename.rsplit("/srt/", 1)[-1]
    metadata = runner.attn_backend.forward_metadata
    if metadata is not None:
        row["metadata"] = {
            "kv_indptr": metadata.kv_indptr.tolist(),
            "kv_indices": len(metadata.kv_indices),
            "attn_logits_rows": metadata.attn_logits.shape[0],
            "num_kv_splits_rows": metadata.num_kv_splits.shape[0],
        }
    row["model_calls"] = list(runner.model_calls)
    # The same padded batch on FlashInfer's decode path (what forward_idle would call there).
    init_flashinfer, plans = runner.flashinfer
    del plans[:]
    try:
        init_flashinfer(batch)
        row["flashinfer"] = "ok"
    except Exception as exc:  # reported, asserted by the test
        row["flashinfer"] = f"{type(exc).__name__}: {exc}"
        row["flashinfer_where"] = traceback.extract_tb(exc.__traceback__)[-1].filename.rsplit("/srt/", 1)[-1]
    row["flashinfer_plans"] = list(plans)
    return row


def main():
    out = {"errors": [], "kinds": {}}
    import sglang

    out["sglang_file"] = sglang.__file__
    import torch
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_info, eagle_worker_v2, multi_layer_eagle_worker_v2
    from sglang.srt.speculative.eagle_info import EagleDraftInput, EagleVerifyInput
    from sglang.srt.speculative.eagle_worker import EAGLEWorker
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2
    try:  # 0.5.11's module does not import on Python 3.11 (an unquoted annotation)
        from sglang.srt.speculative.multi_layer_eagle_worker import MultiLayerEagleWorker
    except NameError as exc:
        out["multi_layer_v1_import"] = f"{type(exc).__name__}: {exc}"
        MultiLayerEagleWorker = None
    from sglang.srt.speculative.multi_layer_eagle_worker_v2 import MultiLayerEagleWorkerV2
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.utils import is_cuda

    out["is_cuda"] = is_cuda()
    set_up_dp_attention()
    draft_config = ModelConfig(sys.argv[1], is_draft_model=True)
    target_config = ModelConfig(sys.argv[2])
    runner = make_runner(target_config)
    runner.flashinfer = make_flashinfer(runner)
    patched = hasattr(EagleDraftInput, "hidden_size_for")
    out["patched"] = patched

    def make_worker(cls):
        worker = cls.__new__(cls)
        draft_runner = SimpleNamespace(model_config=draft_config, tp_group=None)
        worker.speculative_algorithm = SpeculativeAlgorithm.from_string("EAGLE3")
        target_worker = SimpleNamespace(model_config=target_config)
        worker.device = "cpu"
        worker.topk = TOPK
        worker.speculative_num_steps = STEPS
        worker.speculative_num_draft_tokens = DRAFT_TOKENS
        worker.model_config = draft_config  # what 0.5.11's v1 idle inputs read
        worker._model_runner = draft_runner  # v1: the worker is the draft TpModelWorker
        worker.model_runner_list = [draft_runner]
        worker.eagle_use_aux_hidden_state = True
        worker.eagle_num_aux_hidden_states = 3
        if cls in (EAGLEWorkerV2, MultiLayerEagleWorkerV2):  # properties over these two
            worker._target_worker = target_worker
            worker._draft_worker = SimpleNamespace(
                draft_runner=draft_runner,
                draft_tp_context=lambda group: contextlib.nullcontext(),
                draft=stop,
            )
        else:
            worker.target_worker = target_worker
        return worker

    def built(name, make):
        try:
            spec_info = make()
        except Exception as exc:  # reported, asserted by the test
            out["kinds"][name] = {"built": f"{type(exc).__name__}: {exc}"}
            return
        kind = {"built": "ok", "type": type(spec_info).__name__, "runs": []}
        kind["kv_indptr"] = None if getattr(spec_info, "kv_indptr", None) is None else spec_info.kv_indptr.tolist()
        for busy in BUSY_REQUESTS:
            # each run pads its own copy: padding replaces tensors on the spec_info
            copy = type(spec_info).__new__(type(spec_info))
            copy.__dict__.update(spec_info.__dict__)
            kind["runs"].append(run_idle_batch(runner, copy, busy))
        out["kinds"][name] = kind

    # Decode phase, v1 (and multi-layer v1, which delegates to it): what draft() builds.
    def decode_v1():
        batch = SimpleNamespace(spec_info=None)
        EAGLEWorker._draft_preprocess_idle(make_worker(EAGLEWorker), batch)
        batch.spec_info.num_tokens_per_req = TOPK  # draft() sets it next
        return batch.spec_info

    # Decode phase, v2 and multi-layer v2: forward_batch_generation of an idle batch, stopped
    # at the draft worker's draft().
    def decode_v2(cls, module):
        worker = make_worker(cls)
        batch = SimpleNamespace(
            forward_mode=ForwardMode.IDLE, is_extend_in_batch=False, spec_info=None
        )
        # MoE backend selection (server-wide globals): not what is tested here.
        contexts = [name for name in ("speculative_moe_backend_context", "speculative_moe_a2a_backend_context")
                    if hasattr(module, name)]
        saved = {name: getattr(module, name) for name in contexts}
        for name in contexts:
            setattr(module, name, contextlib.nullcontext)
        try:
            cls.forward_batch_generation(worker, batch)
        except StopBeforeForward:
            pass
        finally:
            for name, value in saved.items():
                setattr(module, name, value)
        batch.spec_info.num_tokens_per_req = TOPK  # the draft worker's draft() sets it
        return batch.spec_info

    # Verify phase: what every worker's draft() returns for an idle batch.
    def verify():
        parameters = inspect.signature(EagleVerifyInput.create_idle_input).parameters
        if "device" in parameters:
            return EagleVerifyInput.create_idle_input(TOPK, STEPS, DRAFT_TOKENS, device="cpu")
        out["verify_device_on_cuda_free_cpu"] = "hard-coded"
        try:
            EagleVerifyInput.create_idle_input(TOPK, STEPS, DRAFT_TOKENS)
        except Exception as exc:  # the hard-coded device on a machine without CUDA
            out["verify_cuda_error"] = f"{type(exc).__name__}: {exc}"
        with cuda_made_on_cpu(eagle_info):
            return EagleVerifyInput.create_idle_input(TOPK, STEPS, DRAFT_TOKENS)

    # verify() of an all-idle batch (no worker in reach): never forwarded as it is; the v1
    # workers' draft extend takes it (below).
    def verify_made():
        verify_input = EagleVerifyInput.__new__(EagleVerifyInput)
        verify_input.topk = TOPK
        verify_input.spec_steps = STEPS
        idle_batch = SimpleNamespace(forward_mode=ForwardMode.IDLE, device="cpu", model_config=target_config)
        return verify_input.verify(idle_batch, None, None, 1).draft_input

    # Extend phase, v1 and multi-layer v1: forward_draft_extend_after_decode of an idle batch
    # (what verify() handed over), stopped where it builds the model worker batch.
    def extend_v1(cls):
        if cls is None:
            raise ImportError(out["multi_layer_v1_import"])
        idle_batch = empty_idle_batch(verify_made(), stop)
        try:
            cls.forward_draft_extend_after_decode(make_worker(cls), idle_batch)
        except StopBeforeForward:
            pass
        return idle_batch.spec_info

    # Extend phase, v2 (multi-layer v2 calls the same method): _draft_extend_for_decode builds
    # its input inline and prepare_for_extend_to_fill_draft_kvcache makes it the batch's
    # spec_info; stopped where that builds the ForwardBatch.
    def extend_v2():
        from sglang.srt.speculative import eagle_info_v2
        from sglang.srt.speculative.eagle_worker_v2 import EagleDraftWorker

        worker = make_worker(EagleDraftWorker)
        worker.draft_runner = SimpleNamespace(model_config=draft_config)
        worker.plan_stream_ctx = contextlib.nullcontext()
        worker.plan_stream = None
        worker.cuda_graph_runner_for_draft_extend = None
        empty = torch.empty((0,), dtype=torch.int64)
        batch = SimpleNamespace(
            forward_mode=ForwardMode.IDLE,
            seq_lens=empty.clone(),
            seq_lens_cpu=empty.clone(),
            seq_lens_sum=0,
            spec_info=None,
        )
        result = SimpleNamespace(
            logits_output=SimpleNamespace(hidden_states=torch.empty((0, target_config.hidden_size * 3))),
            accept_lens=empty.clone(),
            next_token_ids=empty.clone(),
        )
        saved = eagle_info_v2.ForwardBatch
        eagle_info_v2.ForwardBatch = SimpleNamespace(init_new=stop)
        try:
            EagleDraftWorker._draft_extend_for_decode(worker, batch, result)
        except StopBeforeForward:
            pass
        finally:
            eagle_info_v2.ForwardBatch = saved
        return batch.spec_info

    for name, make in (
        ("decode v1", decode_v1),
        ("decode v2", lambda: decode_v2(EAGLEWorkerV2, eagle_worker_v2)),
        ("decode multi-layer v2", lambda: decode_v2(MultiLayerEagleWorkerV2, multi_layer_eagle_worker_v2)),
        ("verify", verify),
        ("extend v1", lambda: extend_v1(EAGLEWorker)),
        ("extend multi-layer v1", lambda: extend_v1(MultiLayerEagleWorker)),
        ("extend v2", extend_v2),
    ):
        try:
            built(name, make)
        except Exception:
            out["errors"].append(f"{name}: {traceback.format_exc()}")
    print("PROBE-JSON " + json.dumps(out))


if __name__ == "__main__":
    main()
