"""Writing a patch into a tree, and taking it out again, without losing anything.

``apply`` first saves the original bytes of every file it will change, with a manifest of the
original and patched SHA-256 of each, in ``<sglang>/.eagle-sizing-backup/``; then it replaces
each file atomically (temporary file, then ``os.replace``). If a replacement fails, the files
already replaced are put back. ``revert`` restores the saved bytes of every file that still holds
exactly what ``apply`` wrote, and refuses (naming the file) when one was edited since.
A lock file keeps two runs off one tree.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .engine import FileResult
from .tree import SglangTree, TreeError

BACKUP_DIR = ".eagle-sizing-backup"
MANIFEST = "manifest.json"
LOCK = ".eagle-sizing.lock"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextlib.contextmanager
def locked(tree: SglangTree):
    path = tree.package / LOCK
    try:
        handle = open(path, "a+")
    except OSError as exc:
        raise TreeError(f"{path}: cannot open the lock file ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TreeError(f"{tree.package}: another sglang-eagle-sizing run is working on this tree") from None
        yield
    finally:
        handle.close()
        with contextlib.suppress(OSError):
            path.unlink()


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step, keeping its permission bits."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _backup(tree: SglangTree) -> Path:
    return tree.package / BACKUP_DIR


def read_manifest(tree: SglangTree) -> dict[str, dict[str, str]]:
    path = _backup(tree) / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TreeError(f"{path}: unreadable backup manifest ({exc})") from None


def apply(tree: SglangTree, changed: list[FileResult]) -> None:
    if not changed:
        return
    backup = _backup(tree)
    manifest = read_manifest(tree)
    try:
        (backup / "originals").mkdir(parents=True, exist_ok=True)
        for result in changed:
            entry = manifest.get(result.file)
            original = result.old_text.encode("utf-8")
            if entry is None or entry["patched_sha256"] != sha256(original):
                # Not yet saved (a file saved earlier and patched since keeps its original).
                saved = backup / "originals" / result.file
                saved.parent.mkdir(parents=True, exist_ok=True)
                write_atomic(saved, original)
                entry = {"original_sha256": sha256(original)}
            entry["patched_sha256"] = sha256(result.new_text.encode("utf-8"))
            manifest[result.file] = entry
        write_atomic(backup / MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    except OSError as exc:
        raise TreeError(f"{exc.filename or backup}: cannot save the originals ({exc.strerror}); nothing written") from None

    done: list[FileResult] = []
    try:
        for result in changed:
            write_atomic(tree.srt / result.file, result.new_text.encode("utf-8"))
            done.append(result)
    except BaseException as exc:
        for result in done:
            with contextlib.suppress(OSError):
                write_atomic(tree.srt / result.file, result.old_text.encode("utf-8"))
        if isinstance(exc, OSError):
            raise TreeError(f"{exc.filename or tree.srt}: cannot write ({exc.strerror}); nothing written") from None
        raise


def revert(tree: SglangTree, force: bool = False) -> list[str]:
    """Restore the original bytes; return the files restored."""
    backup = _backup(tree)
    manifest = read_manifest(tree)
    if not manifest:
        raise TreeError(f"{backup}: no backup here; nothing to revert (was this tree patched by apply?)")
    plan: list[tuple[str, bytes]] = []
    for file, entry in sorted(manifest.items()):
        path = tree.srt / file
        current = sha256(path.read_bytes()) if path.exists() else None
        if current == entry["original_sha256"]:
            continue
        if current != entry["patched_sha256"] and not force:
            raise TreeError(f"{path}: edited since apply; nothing reverted (--force restores the original anyway)")
        saved = backup / "originals" / file
        try:
            original = saved.read_bytes()
        except OSError:
            raise TreeError(f"{saved}: the saved original is missing; nothing reverted") from None
        if sha256(original) != entry["original_sha256"]:
            raise TreeError(f"{saved}: the saved original is corrupt; nothing reverted")
        plan.append((file, original))
    for file, original in plan:
        try:
            write_atomic(tree.srt / file, original)
        except OSError as exc:
            raise TreeError(f"{tree.srt / file}: cannot write ({exc.strerror})") from None
    shutil.rmtree(backup, ignore_errors=True)
    return [file for file, _ in plan]
