"""Test-only stand-ins for serving SGLang 0.5.23 on the CPU, and the call recorder.

The 0.5.23 counterpart of ``release_0_5_11/standins/sitecustomize.py`` (0.5.11's, never loaded for a
0.5.23 tree): ``smoke`` puts this folder first on the ``PYTHONPATH`` of a server it starts from
a 0.5.23 tree (``smoke.server.standins_for``), so Python imports it in the launcher and in every
process it spawns. An import hook runs each stand-in right after its SGLang module's code ran,
before other modules bind its names. It lives in this project's harness only: never part of a
patched tree, the fork wheel or the diff. None touches SGLang's sizing code (the helpers of
``speculative/eagle_utils.py``, the drafter's ``fc``, the target's capture, the draft config's
dtype): each replaces a CPU operator PyPI's ``sglang-kernel`` does not ship, or a CUDA-only call
(or, the sixth, a method only the CPU's own attention backend has).
docs/development/release-0.5.23-groundwork.md
(section 5c and its appendix) shows, step by step, the failure each of the first five removes;
docs/smoke.md ("SGLang 0.5.23") the sixth's.

1. ``kernels/ops/kvcache/cache_move.py``: ``copy_all_layer_kv_cache_cpu`` (the KV pool's copy
   warm-up at start-up calls it; the CPU operator is not in PyPI's ``sglang-kernel``) becomes a
   Python port of what the Triton kernel ``copy_all_layer_kv_cache_tiled`` computes: for each
   layer's base pointer and row stride (bytes), every source slot's row is read, then written
   to its target slot.
2. ``srt/mem_cache/allocation.py``, ``kernels/ops/speculative/eagle.py``,
   ``kernels/ops/speculative/multi_layer_eagle.py``: ``_is_cpu = False``; their ``*_cpu``
   operators are missing, the other branch is a Triton kernel (``TRITON_INTERPRET=1`` runs it).
3. ``kernels/ops/speculative/cache_locs.py``, ``kernels/ops/speculative/spec_tree.py``:
   ``_is_cpu = False``, ``_is_xpu = True``: their non-CPU branches are CUDA operators except
   XPU's, which are Triton (``assign_extend_cache_locs``, ``sgl_build_tree_kernel_triton``,
   ``verify_tree_greedy_triton``).
4. ``srt/speculative/eagle_utils.py``: ``default_tree_mask_mode`` returns ``FULL_MASK``. On a
   CPU it returns ``QLEN_ONLY``, the layout of the ``intel_amx`` verify kernel; the Triton
   backend the smoke serves with reads the full mask (with ``QLEN_ONLY`` the tokens go wrong
   after the first verify).
5. ``srt/disaggregation/mooncake/conn.py`` (PD only): ``MooncakeKVSender.
   supports_host_tensor_indices = False``; with it true the prefill server copies the page
   indices into pinned host memory and records a ``torch.cuda.Event``.
6. ``srt/layers/attention/triton_backend.py`` (DP attention only calls it):
   ``TritonAttnBackend.get_cpu_graph_seq_len_fill_value``, which
   ``ForwardBatch._pad_inputs_to_size`` asks the attention backend for on a CPU (only the
   ``intel_amx`` backend has it), returns the Triton backend's own
   ``get_cuda_graph_seq_len_fill_value()`` (1): the sequence length of a padded request.

The PD decode server also needs ``--disaggregation-decode-retraction-backup cpu_tensor`` (a
flag of the 0.5.23 PD cases, ``families/release_0_5_23/smoke_cases.py``): 0.5.23 infers ``host_pool``, whose
host pool registers pinned memory through CUDA.

The recorder (when ``SGLANG_EAGLE_SIZING_SMOKE_SITES`` names a file): every call of 0.5.23's
sizing helpers (``eagle_utils.get_draft_input_from_target_hidden_dim``,
``get_draft_recurrent_hidden_state_spec`` and its ``_from_config`` twin) and of the patch's
parser (``eagle3_draft_config.parse_eagle3_draft_config``, when the tree has it) appends one
JSON line ``{"pid", "function", "file", "line", "scope"}`` naming its caller (file relative to
``sglang/srt``), once per caller and process. It changes no result.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os


#: ``module: names`` of the functions the recorder wraps (when the module has them)
RECORDED = {
    "sglang.srt.speculative.eagle_utils": (
        "get_draft_input_from_target_hidden_dim",
        "get_draft_recurrent_hidden_state_spec",
        "get_draft_recurrent_hidden_state_spec_from_config",
    ),
    "sglang.srt.speculative.eagle3_draft_config": ("parse_eagle3_draft_config",),
}


# -- stand-ins ----------------------------------------------------------------------------


def copy_all_layer_kv_cache_port(data_ptrs, strides, tgt_loc, src_loc) -> None:
    """``copy_all_layer_kv_cache_cpu``: copy row ``src_loc[i]`` to row ``tgt_loc[i]`` in every
    buffer (``data_ptrs[b]``, rows ``strides[b]`` bytes apart); all reads before the writes, as
    the Triton kernel loads a tile's source rows before it stores them."""
    pairs = list(zip(tgt_loc.tolist(), src_loc.tolist()))
    for base, stride in zip(data_ptrs.tolist(), strides.tolist()):
        rows = [ctypes.string_at(base + src * stride, stride) for _, src in pairs]
        for (tgt, _), row in zip(pairs, rows):
            ctypes.memmove(base + tgt * stride, row, stride)


def _patch_cache_move(module) -> None:
    module.copy_all_layer_kv_cache_cpu = copy_all_layer_kv_cache_port


def _triton_branch(module) -> None:
    module._is_cpu = False


def _xpu_triton_branch(module) -> None:
    module._is_cpu = False
    module._is_xpu = True


def _full_mask(module):
    def default_tree_mask_mode():
        return module.TreeMaskMode.FULL_MASK

    return default_tree_mask_mode


def _patch_eagle_utils(module) -> None:
    module.default_tree_mask_mode = _full_mask(module)
    _patch_recorded(module)


def _patch_mooncake_conn(module) -> None:
    module.MooncakeKVSender.supports_host_tensor_indices = False


def _patch_triton_backend(module) -> None:
    backend = module.TritonAttnBackend
    if not hasattr(backend, "get_cpu_graph_seq_len_fill_value"):
        backend.get_cpu_graph_seq_len_fill_value = backend.get_cuda_graph_seq_len_fill_value


# -- the recorder (smoke/standin_hooks.py, shared with the other family's stand-ins) ---------

#: this package's smoke/ folder (its ports.py and standin_hooks.py are loaded by path)
_SMOKE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    "smoke",
)

_spec = importlib.util.spec_from_file_location(
    "_smoke_standin_hooks", os.path.join(_SMOKE, "standin_hooks.py")
)
_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_hooks)
_record, _recorded_function = _hooks.record, _hooks.recorded_function


def _patch_recorded(module) -> None:
    for name in RECORDED.get(module.__name__, ()):
        if hasattr(module, name):
            setattr(module, name, _recorded_function(name, getattr(module, name)))


# -- the import hook ----------------------------------------------------------------------

AFTER_IMPORT = {
    "sglang.kernels.ops.kvcache.cache_move": _patch_cache_move,
    "sglang.srt.mem_cache.allocation": _triton_branch,
    "sglang.kernels.ops.speculative.eagle": _triton_branch,
    "sglang.kernels.ops.speculative.multi_layer_eagle": _triton_branch,
    "sglang.kernels.ops.speculative.cache_locs": _xpu_triton_branch,
    "sglang.kernels.ops.speculative.spec_tree": _xpu_triton_branch,
    "sglang.srt.speculative.eagle_utils": _patch_eagle_utils,
    "sglang.srt.speculative.eagle3_draft_config": _patch_recorded,
    "sglang.srt.disaggregation.mooncake.conn": _patch_mooncake_conn,
    "sglang.srt.layers.attention.triton_backend": _patch_triton_backend,
    # the recorder of the aux hidden states a target captured (no stand-in)
    "sglang.srt.layers.logits_processor": _hooks.record_aux_hidden_states,
}


if os.environ.get("SGLANG_EAGLE_SIZING_SMOKE") == "1":
    _hooks.install(AFTER_IMPORT)
