"""Test-only stand-ins and the site recorder, loaded in every process of a smoke server.

The smoke harness puts this folder first on the server's ``PYTHONPATH``, so Python imports this
file at start-up in the launcher and in every process it spawns (scheduler, detokenizer). It
changes nothing until the SGLang module it concerns is imported: an import hook runs each
stand-in right after its module's code ran, before other modules bind its names. It lives in
this project's harness only; it is never part of a patched tree, the fork wheel or the diff.

Stand-ins (SGLang 0.5.11 line they stand in for, and why):

- ``models/llama.py:790-791`` (``LlamaForCausalLM.set_embed``; also ``set_embed_and_head``
  at 771-772 and the same calls in ``qwen2.py``/``qwen3.py``): ``torch.cuda.empty_cache()`` and
  ``torch.cuda.synchronize()`` after sharing the target's embedding; there is no CUDA device,
  and on a CPU there is nothing to wait for. Both are no-ops for the duration of the call.
- ``speculative/eagle_utils.py:138``: ``sgl_build_tree_kernel_efficient`` is imported only on
  CUDA/HIP/MUSA (line 14), so on a CPU the draft tree build is a NameError. Bound to
  ``ports.build_tree``.
- ``speculative/eagle_utils.py:173-200`` (``verify_tree_greedy_func``): off CUDA and NPU it
  returns its buffers untouched (uninitialised memory: wrong tokens, no error). Replaced by
  ``ports.verify_greedy``.
- ``speculative/eagle_info_v2.py:543-575`` (``assign_extend_cache_locs_func``, v2 worker):
  returns None off CUDA/HIP/MUSA/NPU. Replaced by ``ports.extend_cache_locs``.
- ``speculative/eagle_worker_v2.py:763`` (``EAGLEWorkerV2.verify``):
  ``batch.seq_lens.record_stream(...)`` keeps a CUDA tensor alive across streams; a CPU tensor
  has no streams and raises. ``Tensor.record_stream`` skips CPU tensors. The multi-layer v2
  worker (MTP) meets the same call first in ``managers/overlap_utils.py:146``
  (``FutureMap.resolve_future``: "unknown parameter type"), without importing
  ``eagle_worker_v2``: its module applies the stand-in too.
- ``speculative/multi_layer_eagle_worker_v2.py:319-325``
  (``MultiLayerEagleDraftWorker.draft_forward``): the parents of draft steps after the first
  are built with ``torch.full(..., device="cuda")``; they are built on the CPU.

Stand-ins for DP attention only (``SGLANG_EAGLE_SIZING_SMOKE_DP=1``; ``--tp 2 --dp 2
--enable-dp-attention`` on a CPU):

- ``model_executor/forward_batch_info.py:922`` (``ForwardBatch.prepare_mlp_sync_batch``):
  ``torch.tensor(global_num_tokens, pin_memory=True)``; pinning needs a CUDA device. The call
  builds an unpinned tensor.
- ``layers/rotary_embedding/base.py:308-333`` (``RotaryEmbedding.forward_cpu``): an idle rank
  runs the model on 0 tokens, which the CPU path cannot reshape; 0 tokens pass through.
- ``speculative/eagle_info.py:90-101`` (``EagleVerifyInput.create_idle_input``) builds its
  empty tensors with ``device="cuda"``; they are built on the CPU.
- ``managers/schedule_batch.py:2584-2610`` (``ScheduleBatch.copy``) leaves ``device`` at its
  default, ``"cuda"``; the copy keeps the batch's device.

- ``distributed/parallel_state.py:816-820`` (``GroupCoordinator.all_gather_into_tensor``):
  off NPU/XPU it calls the custom op ``sglang::reg_all_gather_into_tensor``, registered for
  CUDA only; 0.5.11's MAX_LEN padding gathers through it. CPU tensors take the
  ``torch.distributed`` path NPU and XPU take (``_all_gather_into_tensor``).
- ``distributed/parallel_state.py:753-757`` (``GroupCoordinator.reduce_scatter_tensor``): the
  same with ``sglang::reg_reduce_scatter_tensor``, off NPU; the Step-3.5 target's decode
  under DP attention scatters through it. CPU tensors take the NPU path
  (``_reduce_scatter_tensor``).

No stand-in touches the padding mode (``dp_attention.py``): the idle ranks' crash under
0.5.11's own choice is issue 18's bug, which the DP cases show.

The site recorder (when ``SGLANG_EAGLE_SIZING_SMOKE_SITES`` names a file): every call of the
contract classmethods (``EagleDraftInput``/``EagleDraftExtendInput.hidden_size_for`` and
``dtype_for``, and their ``create_idle_input``, which is all ``EagleVerifyInput.verify``'s
worker-less idle input calls) and of the helpers the patch inserts into ``eagle_info.py``
appends one JSON line
``{"pid", "function", "file", "line", "scope"}`` naming its caller (file relative to
``sglang/srt``), once per caller and process. A tree without them records nothing.
"""

from __future__ import annotations

import contextlib
import functools
import os

import importlib.util

#: this package's smoke/ folder (its ports.py and standin_hooks.py are loaded by path)
_SMOKE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    "smoke",
)
_PORTS = os.path.join(_SMOKE, "ports.py")


@functools.lru_cache(maxsize=1)
def _ports():
    """The smoke package's ports module, loaded by path on first use (without importing the
    package, and thus the CLI, into the server)."""
    spec = importlib.util.spec_from_file_location("_sglang_eagle_sizing_ports", _PORTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: functions of eagle_info.py (and of spec_info.py, where the parser of the drafter's config
#: lives) the recorder wraps, when the tree has them
RECORDED_HELPERS = (
    "get_draft_runner",
    "parse_eagle_use_aux_hidden_state",
    "get_eagle_aux_hidden_state_layer_ids",
    "get_eagle_captured_layer_ids",
    "get_eagle_num_aux_hidden_states",
    "get_eagle_draft_model_config",
    "validate_eagle_draft_config",
)
RECORDED_CLASSES = ("EagleDraftInput", "EagleDraftExtendInput")
#: ``create_idle_input`` too: ``EagleVerifyInput.verify`` builds its idle input with no worker
#: in reach (the consuming worker rebuilds it through the contract), so only this call shows
#: that the site ran
RECORDED_METHODS = ("hidden_size_for", "dtype_for", "create_idle_input")


# -- stand-ins ----------------------------------------------------------------------------


@contextlib.contextmanager
def _no_cuda_sync():
    import torch

    saved = torch.cuda.synchronize, torch.cuda.empty_cache
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.empty_cache = lambda *a, **k: None
    try:
        yield
    finally:
        torch.cuda.synchronize, torch.cuda.empty_cache = saved


def _without_cuda_sync(method):
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        with _no_cuda_sync():
            return method(*args, **kwargs)

    return wrapper


def _patch_embed_sharing(module) -> None:
    for name in dir(module):
        cls = getattr(module, name)
        if not isinstance(cls, type) or cls.__module__ != module.__name__:
            continue
        for method in ("set_embed", "set_embed_and_head"):
            if method in cls.__dict__:
                setattr(cls, method, _without_cuda_sync(cls.__dict__[method]))


def _build_tree_port(*args):
    """Called as sgl-kernel's op: eight tensors, then topk, the number of steps, the number
    of verify tokens and the tree mask mode."""
    tensors, numbers = args[:8], args[8:]
    _ports().build_tree(*tensors, *(int(number) for number in numbers))


def _verify_tree_greedy_port(**kwargs):
    """Called with keywords, as ``eagle_info.py`` calls ``verify_tree_greedy_func``."""
    outputs = kwargs["predicts"], kwargs["accept_index"], kwargs["accept_token_num"]
    _ports().verify_greedy(
        *outputs,
        kwargs["candidates"],
        kwargs["retrieve_index"],
        kwargs["retrieve_next_token"],
        kwargs["retrieve_next_sibling"],
        kwargs["target_predict"],
    )
    return outputs


def _assign_extend_cache_locs_port(**kwargs):
    """Called with keywords, as ``eagle_info_v2.py`` calls ``assign_extend_cache_locs_func``."""
    return _ports().extend_cache_locs(
        kwargs["req_pool_indices"],
        kwargs["req_to_token"],
        kwargs["start_offset"],
        kwargs["end_offset"],
    )


def _patch_eagle_utils(module) -> None:
    module.sgl_build_tree_kernel_efficient = _build_tree_port
    module.verify_tree_greedy_func = _verify_tree_greedy_port


def _patch_eagle_info_v2(module) -> None:
    module.assign_extend_cache_locs_func = _assign_extend_cache_locs_port


def _patch_record_stream(module=None) -> None:
    import torch

    original = torch.Tensor.record_stream
    if getattr(original, "_smoke_standin", False):
        return

    def record_stream(self, stream):
        if self.device.type == "cpu":
            return None
        return original(self, stream)

    record_stream._smoke_standin = True
    torch.Tensor.record_stream = record_stream


def _patch_multi_layer_eagle_worker_v2(module) -> None:
    import torch

    _patch_record_stream(module)
    method = module.MultiLayerEagleDraftWorker.draft_forward

    @functools.wraps(method)
    def draft_forward(self, *args, **kwargs):
        with _patched(torch, "full", _cuda_as_cpu):
            return method(self, *args, **kwargs)

    module.MultiLayerEagleDraftWorker.draft_forward = draft_forward


# -- DP attention stand-ins ----------------------------------------------------------------------

DP_ENV = "SGLANG_EAGLE_SIZING_SMOKE_DP"


@contextlib.contextmanager
def _patched(owner, name, replacement):
    saved = getattr(owner, name)
    setattr(owner, name, replacement(saved))
    try:
        yield
    finally:
        setattr(owner, name, saved)


def _unpinned(tensor):
    def make(*args, pin_memory=False, **kwargs):
        return tensor(*args, **kwargs)

    return make


def _cuda_as_cpu(factory):
    def make(*args, device=None, **kwargs):
        if device is not None and str(device).startswith("cuda"):
            device = "cpu"
        return factory(*args, device=device, **kwargs)

    return make


def _patch_forward_batch_info(module) -> None:
    import torch

    method = module.ForwardBatch.prepare_mlp_sync_batch

    @functools.wraps(method)
    def prepare_mlp_sync_batch(self, *args, **kwargs):
        with _patched(torch, "tensor", _unpinned):
            return method(self, *args, **kwargs)

    module.ForwardBatch.prepare_mlp_sync_batch = prepare_mlp_sync_batch


def _patch_rotary(module) -> None:
    method = module.RotaryEmbedding.forward_cpu

    @functools.wraps(method)
    def forward_cpu(self, positions, query, key, *args, **kwargs):
        if positions.numel() == 0:
            return query, key
        return method(self, positions, query, key, *args, **kwargs)

    module.RotaryEmbedding.forward_cpu = forward_cpu


def _patch_verify_idle_input(module) -> None:
    import torch

    create = module.EagleVerifyInput.create_idle_input.__func__

    def create_idle_input(cls, *args, **kwargs):
        with _patched(torch, "empty", _cuda_as_cpu), _patched(torch, "full", _cuda_as_cpu):
            return create(cls, *args, **kwargs)

    module.EagleVerifyInput.create_idle_input = classmethod(create_idle_input)


def _cpu_tensors_via(method, fallback: str):
    """``method``, except that CPU tensors take ``self.<fallback>``, the ``torch.distributed``
    path SGLang keeps for NPU (and XPU)."""

    @functools.wraps(method)
    def wrapper(self, output, input):
        if output.device.type == "cpu":
            return getattr(self, fallback)(output, input)
        return method(self, output, input)

    return wrapper


def _patch_parallel_state(module) -> None:
    coordinator = module.GroupCoordinator
    for name in ("all_gather_into_tensor", "reduce_scatter_tensor"):
        setattr(coordinator, name, _cpu_tensors_via(getattr(coordinator, name), "_" + name))


def _patch_schedule_batch(module) -> None:
    method = module.ScheduleBatch.copy

    @functools.wraps(method)
    def copy(self):
        result = method(self)
        result.device = self.device
        return result

    module.ScheduleBatch.copy = copy


# -- the recorder (smoke/standin_hooks.py, shared with the other family's stand-ins) ---------

_spec = importlib.util.spec_from_file_location(
    "_smoke_standin_hooks", os.path.join(_SMOKE, "standin_hooks.py")
)
_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_hooks)
_record, _recorded_function = _hooks.record, _hooks.recorded_function


def _recorded_classmethod(method: str, function):
    def wrapper(cls, *args, **kwargs):
        # the class it was called on: EagleDraftExtendInput inherits create_idle_input
        _record(f"{cls.__name__}.{method}", 2)
        return function(cls, *args, **kwargs)

    functools.update_wrapper(wrapper, function)
    return classmethod(wrapper)


def _patch_recorded_helpers(module) -> None:
    for name in RECORDED_HELPERS:
        if hasattr(module, name):
            setattr(module, name, _recorded_function(name, getattr(module, name)))


def _patch_eagle_info(module) -> None:
    if os.environ.get(DP_ENV) == "1":
        _patch_verify_idle_input(module)
    _patch_recorded_helpers(module)
    for class_name in RECORDED_CLASSES:
        cls = getattr(module, class_name, None)
        if cls is None:
            continue
        for method in RECORDED_METHODS:
            entry = cls.__dict__.get(method)
            if isinstance(entry, classmethod):
                setattr(
                    cls,
                    method,
                    _recorded_classmethod(method, entry.__func__),
                )


# -- the import hook ----------------------------------------------------------------------------

AFTER_IMPORT = {
    "sglang.srt.models.llama": _patch_embed_sharing,
    "sglang.srt.models.qwen2": _patch_embed_sharing,
    "sglang.srt.models.qwen3": _patch_embed_sharing,
    "sglang.srt.speculative.eagle_utils": _patch_eagle_utils,
    "sglang.srt.speculative.eagle_info_v2": _patch_eagle_info_v2,
    "sglang.srt.speculative.eagle_info": _patch_eagle_info,
    # before any module imports the parser from it
    "sglang.srt.speculative.spec_info": _patch_recorded_helpers,
    "sglang.srt.speculative.eagle_worker_v2": _patch_record_stream,
    "sglang.srt.speculative.multi_layer_eagle_worker_v2": _patch_multi_layer_eagle_worker_v2,
    # the recorder of the aux hidden states a target captured (no stand-in)
    "sglang.srt.layers.logits_processor": _hooks.record_aux_hidden_states,
}


if os.environ.get(DP_ENV) == "1":
    AFTER_IMPORT.update(
        {
            "sglang.srt.model_executor.forward_batch_info": _patch_forward_batch_info,
            "sglang.srt.layers.rotary_embedding.base": _patch_rotary,
            "sglang.srt.managers.schedule_batch": _patch_schedule_batch,
            "sglang.srt.distributed.parallel_state": _patch_parallel_state,
        }
    )


if os.environ.get("SGLANG_EAGLE_SIZING_SMOKE") == "1":
    _hooks.install(AFTER_IMPORT)
