"""A cache entry several processes may ask for at once (two pytest workers, two CLI runs): made
once, never seen half-written.

The process that makes it takes ``<entry>.lock`` (``flock``: the kernel releases it when the
process dies), looks again (if another process made the entry meanwhile, that one is used),
removes what a killed run left (``<entry>.partial*``), fills ``<entry>.partial-<pid>`` and
renames the result into place: the one step a reader can see. A reader that finds the entry
complete takes no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def filling(entry: Path, complete: Callable[[], bool]) -> Iterator[Path | None]:
    """``None`` if ``complete()`` (now, or once the process making the entry is done); else,
    holding the lock, the path ``<entry>.partial-<pid>`` (nothing there yet) to fill. The
    caller renames its result into place; what is left at the partial path is removed.
    """
    if complete():
        yield None
        return
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{entry}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete():
            yield None
            return
        for leftover in entry.parent.glob(glob.escape(entry.name) + ".partial*"):
            _remove(leftover)
        partial = entry.with_name(f"{entry.name}.partial-{os.getpid()}")
        try:
            yield partial
        finally:
            _remove(partial)


def filled_folder(
    folder: Path,
    fill: Callable[[Path], None],
    complete: Callable[[], bool] | None = None,
) -> Path:
    """``folder``, made once by ``fill(partial)`` (which creates ``partial`` and fills it) and
    renamed into place. ``complete()`` (default: the folder exists) says it is whole."""
    complete = complete or folder.is_dir
    with filling(folder, complete) as partial:
        if partial is not None:
            fill(partial)
            if folder.exists():  # there but not complete(): never made by this module
                _remove(folder)
            partial.rename(folder)
    return folder
