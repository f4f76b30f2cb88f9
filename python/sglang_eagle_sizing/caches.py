"""Where this tool keeps its caches. Light (no libcst): the help texts name ``CACHE_ENV`` at
start-up, before the engine is loaded."""

from __future__ import annotations

import os
from pathlib import Path

#: the one environment variable that moves every cache of this tool (check's findings under
#: ``check/``, apply's and diff's rewrites under ``rewrite/``, the release wheel under ``wheels/``)
CACHE_ENV = "SGLANG_EAGLE_SIZING_CACHE"


def cache_root() -> Path:
    """``$SGLANG_EAGLE_SIZING_CACHE``, else ``$XDG_CACHE_HOME/sglang-eagle-sizing``, else
    ``~/.cache/sglang-eagle-sizing``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"
    )
    return Path(base) / "sglang-eagle-sizing"


def default_cache_dir() -> Path:
    """Where ``check`` keeps its findings."""
    return cache_root() / "check"
