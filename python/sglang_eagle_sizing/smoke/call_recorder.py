"""The call recorder both families' smoke stand-ins share (``standins/sitecustomize.py``,
``standins_0_5_23/sitecustomize.py``): in a server process, each call of a wrapped function is
written once per calling line (function, file under ``sglang/srt/``, line, scope, pid) as a JSON
line to the file ``$SGLANG_EAGLE_SIZING_SMOKE_SITES`` names. Loaded by its path (the server's
environment need not hold this package); it imports nothing of it."""

import functools
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
