"""Run the fork's CPU tests on a release before 0.5.11:

    python3 older_release_compat.py <test file or folder>... [-- unittest arguments]

The file the fork gets is written for SGLang 0.5.11 and uses 0.5.11's API only. This gives an
older release (0.5.9, 0.5.10, 0.5.10.post1: ``test/test_older_releases.py``) the pieces of that
API the file reaches and the release lacks, each only where it is missing, when the module
that should hold it is imported; then it runs the files in one process, each loaded as
``python3 <file>`` would load it (``run_fork_tests.py``). The release's own files are not touched (``revert`` must give back every byte).

- ``sglang.test.test_utils.maybe_stub_sgl_kernel`` (from 0.5.10): 0.5.11's, which imports
  ``sgl_kernel`` as an empty mocked package where it cannot load (no GPU driver);
- ``ModelRunner.init_aux_hidden_state_capture`` (0.5.11): before it, ``ModelRunner.initialize``
  told the model inline, after loading it, from the two attributes ``__init__`` sets (what the
  patch changes, ``__init__``'s choice of layers, still runs for real);
- ``ModelConfig.spec_hidden_size`` (0.5.11, with hyper-connection models): ``hidden_size``
  times the config's ``hc_mult``, as 0.5.11 computes it. Before 0.5.11 no model reads
  ``hc_mult``; the patch's ``hidden_size_for`` reads ``spec_hidden_size`` where the release has
  it, so the test's ``hc_mult=2`` pair is sized as on 0.5.11 (every other config is
  ``hidden_size`` wide either way);
- the multi-layer v2 draft worker built its ``FlashAttentionBackend`` itself before 0.5.11,
  not through ``DraftBackendFactory`` (whose backends the test replaces by ``None``): the
  class is replaced by the same ``None``-giving stand-in. Nothing else the test runs builds one;
- the draft CUDA-graph runners take their attention backend as a keyword argument
  (``draft_attn_backend`` / ``draft_extend_attn_backend``, 0.5.11); before, they read it from
  the draft model runner / the worker, where it is put;
- the graph runners' input buffers as one ``buffers`` object (0.5.10): 0.5.9's runners hold
  ``hidden_states`` themselves, which ``buffers.hidden_states`` reads;
- ``sglang.srt.layers.rotary_embedding.base``: a package's module in later releases, where
  the test sets RoPE's CPU flag; a module of that name before, which is given itself as
  ``base``.

A fresh interpreter the test starts (``python -c``, to import one module alone) gets the same
pieces: a ``sitecustomize`` put first on its ``PYTHONPATH`` installs the hook there too.

And one test class is skipped where its premise does not hold: ``TestPaddedIdleBatchOnTriton``
needs SGLang to pad the idle rank of two attention-DP ranks to its busy peer's tokens
(``DpPaddingMode.MAX_LEN``); 0.5.9 chooses ``SUM_LEN`` there (no padding, so no padded idle
batch to build attention metadata for), and the class is skipped, saying so.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import inspect
import os
import sys
import tempfile
import unittest
from types import SimpleNamespace
from unittest import mock


def _maybe_stub_sgl_kernel():
    """SGLang 0.5.11's ``maybe_stub_sgl_kernel``."""
    try:
        import sgl_kernel  # noqa: F401

        return
    except (ImportError, OSError):
        pass

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            module.__getattr__ = lambda name: mock.MagicMock()

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname == "sgl_kernel" or fullname.startswith("sgl_kernel."):
                return importlib.machinery.ModuleSpec(fullname, Loader(), is_package=True)
            return None

    sys.meta_path.insert(0, Finder())


def _init_aux_hidden_state_capture(self):
    """What 0.5.9-0.5.10's ``ModelRunner.initialize`` does inline after loading the model."""
    if self.eagle_use_aux_hidden_state:
        self.model.set_eagle3_layers_to_capture(self.eagle_aux_hidden_state_layer_ids)


def _test_utils(module):
    if not hasattr(module, "maybe_stub_sgl_kernel"):
        module.maybe_stub_sgl_kernel = _maybe_stub_sgl_kernel


def _model_runner(module):
    if not hasattr(module.ModelRunner, "init_aux_hidden_state_capture"):
        module.ModelRunner.init_aux_hidden_state_capture = _init_aux_hidden_state_capture


def _model_config(module):
    init = module.ModelConfig.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not hasattr(self, "spec_hidden_size"):
            hc_mult = getattr(self.hf_text_config, "hc_mult", 1)
            self.spec_hidden_size = self.hidden_size * hc_mult if hc_mult > 1 else self.hidden_size

    module.ModelConfig.__init__ = __init__


def _flashattention_backend(module):
    module.FlashAttentionBackend = lambda **kwargs: None


def _multi_layer_eagle_worker_v2(module):
    """Only where the worker builds the backend itself (not through DraftBackendFactory)."""
    if "FlashAttentionBackend" in inspect.getsource(module.MultiLayerEagleDraftWorker):
        import sglang.srt.layers.attention.flashattention_backend as backend

        _flashattention_backend(backend)


def _takes_backend(cls, keyword: str, put):
    """``cls(worker, **{keyword: backend})`` where ``__init__`` has no such keyword:
    ``put(worker, backend)`` where the release reads it, then the release's ``__init__``."""
    init = cls.__init__
    if keyword in inspect.signature(init).parameters:
        return

    def __init__(self, eagle_worker, *args, **kwargs):
        if keyword in kwargs:
            put(eagle_worker, kwargs.pop(keyword))
        init(self, eagle_worker, *args, **kwargs)

    cls.__init__ = __init__


def _with_buffers(cls):
    if "self.buffers" not in inspect.getsource(cls):
        cls.buffers = property(lambda self: SimpleNamespace(hidden_states=self.hidden_states))


def _draft_runner(worker):
    return worker.model_runner if hasattr(worker, "model_runner") else worker.draft_runner


def _draft_cuda_graph_runner(module):
    cls = module.EAGLEDraftCudaGraphRunner
    _takes_backend(
        cls,
        "draft_attn_backend",
        lambda worker, backend: setattr(_draft_runner(worker), "draft_attn_backend", backend),
    )
    _with_buffers(cls)


def _draft_extend_cuda_graph_runner(module):
    cls = module.EAGLEDraftExtendCudaGraphRunner
    _takes_backend(
        cls,
        "draft_extend_attn_backend",
        lambda worker, backend: setattr(worker, "draft_extend_attn_backend", backend),
    )
    _with_buffers(cls)


def _multi_layer_draft_extend_cuda_graph_runner(module):
    _with_buffers(module.MultiLayerEagleDraftExtendCudaGraphRunner)


def _rotary_embedding(module):
    # A module before 0.5.10's package of that name: it is its own ``base``.
    if not hasattr(module, "__path__") and not hasattr(module, "base"):
        module.base = module


def _pads_an_idle_rank_of_two() -> bool:
    from sglang.srt.layers import dp_attention

    with mock.patch.object(dp_attention, "_ATTN_DP_SIZE", 2):
        mode = dp_attention.DpPaddingMode.get_dp_padding_mode(False, [0, 3])
    return mode.is_max_len()


def _skip_what_this_release_lacks(modules) -> None:
    """The classes whose premise this release lacks, skipped."""
    if _pads_an_idle_rank_of_two():
        return
    for module in modules:
        if hasattr(module, "TestPaddedIdleBatchOnTriton"):
            module.TestPaddedIdleBatchOnTriton = unittest.skip(
                "this release does not pad the idle rank of two attention-DP ranks"
                " (DpPaddingMode.SUM_LEN for 0 and 3 tokens)"
            )(module.TestPaddedIdleBatchOnTriton)


#: module -> what it is given after it is executed
PATCHES = {
    "sglang.test.test_utils": _test_utils,
    "sglang.srt.model_executor.model_runner": _model_runner,
    "sglang.srt.configs.model_config": _model_config,
    "sglang.srt.layers.rotary_embedding": _rotary_embedding,
    "sglang.srt.speculative.multi_layer_eagle_worker_v2": _multi_layer_eagle_worker_v2,
    "sglang.srt.speculative.eagle_draft_cuda_graph_runner": _draft_cuda_graph_runner,
    "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner": (
        _draft_extend_cuda_graph_runner
    ),
    "sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner": (
        _multi_layer_draft_extend_cuda_graph_runner
    ),
}


class _Patched(importlib.abc.Loader):
    """The module's own loader, then its patch."""

    def __init__(self, loader, patch):
        self._loader, self._patch = loader, patch

    def __getattr__(self, name):
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds the modules of ``PATCHES`` with the other finders and patches them once loaded."""

    def find_spec(self, fullname, path, target=None):
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _Patched(spec.loader, patch)
                return spec
        return None


def _in_subprocesses() -> None:
    """The interpreters the test starts get the hook too (through ``sitecustomize``)."""
    folder = tempfile.mkdtemp(prefix="older-release-compat-")
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(folder, "sitecustomize.py"), "w") as file:
        file.write(
            f"import sys\nsys.path.insert(0, {here!r})\n"
            "import older_release_compat\n"
            f"sys.path.remove({here!r})\n"
            "sys.meta_path.insert(0, older_release_compat._AfterImport())\n"
        )
    paths = [folder, os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run_fork_tests

    sys.path.pop(0)

    paths, unittest_args = run_fork_tests.split_argv(sys.argv[1:])
    sys.meta_path.insert(0, _AfterImport())
    _in_subprocesses()
    modules = run_fork_tests.load(run_fork_tests.test_files(paths))
    _skip_what_this_release_lacks(modules)
    sys.exit(run_fork_tests.run(modules, unittest_args))
