"""What both families' smoke stand-ins (``standins/sitecustomize.py``,
``standins_0_5_23/sitecustomize.py``) are built on, loaded by its path (a server's environment
need not hold this package; it imports nothing of it):

- ``install``: the import hook that runs a stand-in on a module right after SGLang imports it;
- ``record`` / ``recorded_function``: the call recorder. In a server process each call of a
  wrapped function is written once per calling line (function, file under ``sglang/srt/``,
  line, scope, pid) as a JSON line to the file ``$SGLANG_EAGLE_SIZING_SMOKE_SITES`` names.
"""

import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading

SITES_ENV = "SGLANG_EAGLE_SIZING_SMOKE_SITES"

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
