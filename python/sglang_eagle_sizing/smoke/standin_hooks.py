"""What both families' smoke stand-ins (``standins/sitecustomize.py``,
``standins_0_5_23/sitecustomize.py``) are built on, loaded by its path (a server's environment
need not hold this package; it imports nothing of it):

- ``install``: the import hook that runs a stand-in on a module right after SGLang imports it;
- ``record`` / ``recorded_function``: the call recorder. In a server process each call of a
  wrapped function is written once per calling line (function, file under ``sglang/srt/``,
  line, scope, pid) as a JSON line to the file ``$SGLANG_EAGLE_SIZING_SMOKE_SITES`` names;
- ``record_aux_hidden_states``: the aux hidden states a target hands its EAGLE-3 drafter. With
  ``$SGLANG_EAGLE_SIZING_SMOKE_AUX`` naming a folder, the first ``AUX_RECORDS`` calls of
  ``LogitsProcessor.forward`` in ``EXTEND`` mode (a target's prefill) that carry aux hidden
  states save the tokens, their positions and the captured states (``torch.save``), for
  ``smoke`` to compare with transformers' ``output_hidden_states``. It changes no result.
"""

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading

SITES_ENV = "SGLANG_EAGLE_SIZING_SMOKE_SITES"
AUX_ENV = "SGLANG_EAGLE_SIZING_SMOKE_AUX"
#: prefills recorded per process (the first batch's is the one compared)
AUX_RECORDS = 2

_seen: set = set()
_lock = threading.Lock()


def _srt_relative(path: str) -> str:
    marker = os.sep + os.path.join("sglang", "srt") + os.sep
    index = path.rfind(marker)
    return path[index + len(marker) :] if index >= 0 else path


def record(function: str, depth: int) -> None:
    out = os.environ.get(SITES_ENV)
    if not out:
        return
    frame = sys._getframe(depth)
    code = frame.f_code
    key = (function, code.co_filename, frame.f_lineno)
    with _lock:
        if key in _seen:
            return
        _seen.add(key)
        entry = {
            "pid": os.getpid(),
            "function": function,
            "file": _srt_relative(code.co_filename),
            "line": frame.f_lineno,
            "scope": getattr(code, "co_qualname", code.co_name),
        }
        with open(out, "a") as handle:
            handle.write(json.dumps(entry) + "\n")


def recorded_function(name: str, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        record(name, 2)
        return function(*args, **kwargs)

    return wrapper


def record_aux_hidden_states(module) -> None:
    """Wrap ``module.LogitsProcessor.forward`` (``sglang.srt.layers.logits_processor``, both
    families: ``forward(input_ids, hidden_states, lm_head, logits_metadata,
    aux_hidden_states=None, ...)``) to save what a target's prefill captured."""
    folder = os.environ.get(AUX_ENV)
    if not folder:
        return
    forward = module.LogitsProcessor.forward
    count = [0]

    @functools.wraps(forward)
    def wrapper(self, input_ids, hidden_states, lm_head, logits_metadata, *args, **kwargs):
        aux = args[0] if args else kwargs.get("aux_hidden_states")
        mode = getattr(getattr(logits_metadata, "forward_mode", None), "name", "")
        positions = getattr(logits_metadata, "positions", None)
        if aux is not None and mode == "EXTEND" and positions is not None:
            with _lock:
                count[0] += 1
                n = count[0]
            if n <= AUX_RECORDS:
                import torch

                chunks = list(aux) if isinstance(aux, (list, tuple)) else [aux]
                torch.save(
                    {
                        "input_ids": input_ids.detach().cpu(),
                        "positions": positions.detach().cpu(),
                        "aux": [c.detach().float().cpu() for c in chunks],
                    },
                    os.path.join(folder, f"aux-{os.getpid()}-{n}.pt"),
                )
        return forward(self, input_ids, hidden_states, lm_head, logits_metadata, *args, **kwargs)

    module.LogitsProcessor.forward = wrapper


# -- the import hook ----------------------------------------------------------------------


class _Loader(importlib.abc.Loader):
    def __init__(self, loader, after):
        self._loader = loader
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._after(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, after_import):
        self._after_import = after_import

    def find_spec(self, fullname, path, target=None):
        after = self._after_import.get(fullname)
        if after is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, after)
        return spec


def install(after_import: dict) -> None:
    """Run ``after_import[name](module)`` right after each module ``name`` is imported."""
    sys.meta_path.insert(0, _Finder(after_import))
