"""Writing a patch into a tree, and taking it out again, without losing anything.

Everything lives in ``<sglang>/.eagle-sizing-backup/``:

- ``originals/<file>``: the bytes of each file before the first ``apply``;
- ``patched/<file>``: the bytes ``apply`` wrote (to name the line a later hand edit changed);
- ``manifest.json``: per file, the SHA-256 of its original and of its patched bytes;
- ``journal.json``: only while a run replaces files (see below);
- ``edited/<file>``: a hand-edited file ``--force`` replaced, kept for the user.

A run that replaces files is a transaction. It first stages every byte it will need (originals,
the new contents) in the backup folder, then writes ``journal.json`` (file by file: SHA-256 and
stored copy of the bytes before and after) atomically: that is the commit point. Only then does
it replace the tree's files, each atomically (temporary file, ``fsync``, ``os.replace``), then it
writes the manifest and removes the journal. So whatever stops a run:

- before the journal is written, no tree file has been touched;
- after, the journal says which state each file must reach and holds its bytes: the next
  ``apply`` or ``revert`` finishes the interrupted run first (``recover``), ``check`` reports it.

An exception inside the run (a full disk, ...) rolls the replaced files back at once. Every file
write, rename and removal goes through the primitives below (``_FS``), which the fault-injection
tests count and interrupt one by one. A lock (``.eagle-sizing.lock``, ``flock``) keeps two runs
off one tree.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .engine import FileResult
from .tree import SglangTree, TreeError

BACKUP_DIR = ".eagle-sizing-backup"
MANIFEST = "manifest.json"
JOURNAL = "journal.json"
LOCK = ".eagle-sizing.lock"
ORIGINALS, PATCHED, STAGED, EDITED = "originals", "patched", "staged", "edited"

Manifest = dict[str, dict[str, str]]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the writing primitives -----------------------------------------------------------
class _Primitives:
    """Every change this module makes to the disk. One call is one write point."""

    @staticmethod
    def write_temp(folder: Path, name: str, data: bytes, mode: int) -> Path:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return Path(tmp)

    @staticmethod
    def replace(source: Path, target: Path) -> None:
        os.replace(source, target)
        _fsync_folder(target.parent)

    @staticmethod
    def unlink(path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()

    @staticmethod
    def mkdir(path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def rmtree(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=False)


_FS = _Primitives()


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step, keeping its permission bits."""
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    tmp = _FS.write_temp(path.parent, path.name, data, mode)
    try:
        _FS.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_json(path: Path, value: object) -> None:
    write_atomic(path, (json.dumps(value, indent=2, sort_keys=True) + "\n").encode())


def _remove_stale_temps(path: Path) -> None:
    """Temporary files a killed run left next to ``path``."""
    for stale in path.parent.glob("." + path.name + ".*.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()


# -- the lock -------------------------------------------------------------------------
@contextlib.contextmanager
def locked(tree: SglangTree) -> Iterator[None]:
    """Hold the tree's lock, or fail at once naming the run that holds it.

    The lock file is removed on release while still locked; a run that opened it before the
    removal finds, once it gets the lock, that the path no longer names the file it locked,
    and starts over: two runs can never both believe they hold the lock.
    """
    path = tree.package / LOCK
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise TreeError(
                f"{path}: cannot create the lock file ({exc.strerror}); nothing written"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise TreeError(
                f"{tree.package}: another sglang-eagle-sizing run (pid {holder}) is working "
                "on this tree; nothing written, try again when it has finished"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # removed by the run that held it: lock the new file instead
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)


# -- the backup folder ----------------------------------------------------------------
def _backup(tree: SglangTree) -> Path:
    return tree.package / BACKUP_DIR


def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TreeError(f"{path}: unreadable {what} ({exc}); nothing written") from None
    if not isinstance(value, dict):
        raise TreeError(f"{path}: unreadable {what} (not an object); nothing written")
    return value


def read_manifest(tree: SglangTree) -> Manifest:
    return _read_json(_backup(tree) / MANIFEST, "backup manifest")


def _stored(tree: SglangTree, relative: str, expected_sha: str) -> bytes:
    path = _backup(tree) / relative
    try:
        data = path.read_bytes()
    except OSError:
        raise TreeError(f"{path}: the saved copy is missing; nothing written") from None
    if sha256(data) != expected_sha:
        raise TreeError(f"{path}: the saved copy is corrupt; nothing written")
    return data


def _current_sha(path: Path) -> str | None:
    try:
        return sha256(path.read_bytes())
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TreeError(
            f"{path}: cannot read ({exc.strerror}); nothing written"
        ) from None


def _first_difference(expected: bytes, actual: bytes) -> int:
    """The 1-based line of ``actual`` where it first differs from ``expected``."""
    old = expected.decode("utf-8", "replace").splitlines()
    new = actual.decode("utf-8", "replace").splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, _, _, start, _ in matcher.get_opcodes():
        if tag != "equal":
            return start + 1
    return min(len(old), len(new)) + 1


# -- the journal ----------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One file of a transaction: its bytes before and after, and where each is stored."""

    file: str
    before_sha256: str
    before: str  # path of the stored copy, relative to the backup folder
    after_sha256: str
    after: str


@dataclass(frozen=True)
class Journal:
    operation: str  # "apply" | "revert"
    steps: tuple[Step, ...]
    #: the manifest once the run is done (``None``: no backup left, the tree is pristine)
    manifest: Manifest | None

    def to_json(self) -> dict:
        return {
            "operation": self.operation,
            "steps": [step.__dict__ for step in self.steps],
            "manifest": self.manifest,
        }

    @classmethod
    def read(cls, tree: SglangTree) -> Journal | None:
        value = _read_json(_backup(tree) / JOURNAL, "journal")
        if not value:
            return None
        try:
            steps = tuple(Step(**step) for step in value["steps"])
            return cls(value["operation"], steps, value["manifest"])
        except (KeyError, TypeError) as exc:
            raise TreeError(
                f"{_backup(tree) / JOURNAL}: unreadable journal ({exc})"
            ) from None


def describe(tree: SglangTree) -> str | None:
    """One line on an interrupted run, if the tree holds one."""
    journal = Journal.read(tree)
    if journal is None:
        return None
    done = sum(_current_sha(tree.srt / s.file) == s.after_sha256 for s in journal.steps)
    return (
        f"{_backup(tree) / JOURNAL}: an interrupted {journal.operation} "
        f"({done} of {len(journal.steps)} files written)"
    )


def _write_files(tree: SglangTree, journal: Journal) -> None:
    """Bring every file of the journal to its ``after`` bytes."""
    for step in journal.steps:
        path = tree.srt / step.file
        current = _current_sha(path)
        if current != step.after_sha256:
            if current != step.before_sha256:
                raise TreeError(
                    f"{path}: changed while a {journal.operation} was interrupted; left as it "
                    f"is with {_backup(tree) / JOURNAL} (revert or restore it by hand)"
                )
            write_atomic(path, _stored(tree, step.after, step.after_sha256))
        _remove_stale_temps(path)


def _complete(tree: SglangTree, journal: Journal) -> None:
    """Every file is written: record the new state, then drop the journal."""
    backup = _backup(tree)
    if journal.manifest is None:
        _FS.unlink(backup / MANIFEST)
        _FS.unlink(backup / JOURNAL)
        with contextlib.suppress(
            OSError
        ):  # done: a leftover folder without manifest is inert
            _FS.rmtree(backup)
    else:
        _write_json(backup / MANIFEST, journal.manifest)
        _FS.unlink(backup / JOURNAL)
        with contextlib.suppress(OSError):
            _FS.rmtree(backup / STAGED)


def _roll_back(tree: SglangTree, journal: Journal) -> None:
    for step in journal.steps:
        path = tree.srt / step.file
        if _current_sha(path) == step.after_sha256:
            write_atomic(path, _stored(tree, step.before, step.before_sha256))
        _remove_stale_temps(path)
    _FS.unlink(_backup(tree) / JOURNAL)


def recover(tree: SglangTree) -> Journal | None:
    """Finish a run that was interrupted after its commit point; return its journal."""
    journal = Journal.read(tree)
    if journal is not None:
        _write_files(tree, journal)
        _complete(tree, journal)
    return journal


def _run(tree: SglangTree, journal: Journal) -> None:
    """Commit ``journal`` and carry it out; on an exception while files are being replaced,
    put them back as they were. A failure after that leaves the journal for the next run.
    """
    try:
        _write_json(_backup(tree) / JOURNAL, journal.to_json())
    except OSError as exc:
        raise _staging_error(tree, exc) from None
    try:
        _write_files(tree, journal)
    except BaseException as exc:
        try:
            _roll_back(tree, journal)
        except (OSError, TreeError):
            raise TreeError(
                f"{tree.srt}: {journal.operation} failed ({_reason(exc)}) and could not be "
                f"rolled back; {_backup(tree) / JOURNAL} holds every byte: run "
                f"{journal.operation} again to finish it"
            ) from None
        if isinstance(exc, OSError):
            raise TreeError(
                f"{exc.filename or tree.srt}: cannot write ({exc.strerror}); "
                f"{journal.operation} rolled back, nothing changed"
            ) from None
        raise
    try:
        _complete(tree, journal)
    except OSError as exc:
        raise TreeError(
            f"{exc.filename or _backup(tree)}: every file is written but the backup could not "
            f"be updated ({exc.strerror}); run {journal.operation} again to finish"
        ) from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return f"{exc.filename}: {exc.strerror}"
    return str(exc) or type(exc).__name__


def _stage(tree: SglangTree, relative: str, data: bytes) -> None:
    path = _backup(tree) / relative
    _FS.mkdir(path.parent)
    write_atomic(path, data)


def _staging_error(tree: SglangTree, exc: OSError) -> TreeError:
    return TreeError(
        f"{exc.filename or _backup(tree)}: cannot save a copy ({exc.strerror}); nothing written"
    )


# -- apply ----------------------------------------------------------------------------
def apply(
    tree: SglangTree, changed: list[FileResult], force: bool = False
) -> list[str]:
    """Write the rewritten files; return the hand-edited files ``force`` saved aside."""
    if not changed:
        return []
    manifest = read_manifest(tree)
    edited = _edited_since_apply(tree, manifest, changed)
    if edited and not force:
        file, line = edited[0]
        raise TreeError(
            f"{tree.srt / file}:{line}: edited since apply; nothing written "
            "(apply --force re-patches it and keeps the edited file in "
            f"{BACKUP_DIR}/{EDITED}/)"
        )
    steps: list[Step] = []
    new_manifest = {file: dict(entry) for file, entry in manifest.items()}
    try:
        _FS.mkdir(_backup(tree))
        for file, _ in edited:
            _stage(tree, f"{EDITED}/{file}", (tree.srt / file).read_bytes())
        for result in changed:
            old, new = result.old_text.encode("utf-8"), result.new_text.encode("utf-8")
            entry = new_manifest.get(result.file)
            if entry is None or entry["original_sha256"] == sha256(old):
                _stage(tree, f"{ORIGINALS}/{result.file}", old)
                entry = {"original_sha256": sha256(old)}
            _stage(tree, f"{STAGED}/{result.file}", old)
            _stage(tree, f"{PATCHED}/{result.file}", new)
            entry["patched_sha256"] = sha256(new)
            new_manifest[result.file] = entry
            steps.append(
                Step(
                    result.file,
                    sha256(old),
                    f"{STAGED}/{result.file}",
                    sha256(new),
                    f"{PATCHED}/{result.file}",
                )
            )
    except OSError as exc:
        raise _staging_error(tree, exc) from None
    _run(tree, Journal("apply", tuple(steps), new_manifest))
    return [file for file, _ in edited]


def _edited_since_apply(
    tree: SglangTree, manifest: Manifest, changed: list[FileResult]
) -> list[tuple[str, int]]:
    """Files apply patched before that now hold neither the original nor the patch."""
    edited = []
    for result in changed:
        entry = manifest.get(result.file)
        current = sha256(result.old_text.encode("utf-8"))
        if entry is None or current in (
            entry["original_sha256"],
            entry["patched_sha256"],
        ):
            continue
        patched = _backup(tree) / PATCHED / result.file
        line = 1
        if patched.is_file():
            line = _first_difference(
                patched.read_bytes(), result.old_text.encode("utf-8")
            )
        edited.append((result.file, line))
    return edited


# -- revert ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Reverted:
    #: files given back their original bytes
    restored: list[str]
    #: hand-edited files ``force`` replaced, kept under ``EDITED_DIR``
    edited: list[str]


def revert(tree: SglangTree, force: bool = False) -> Reverted:
    """Restore the original bytes of every file apply changed."""
    backup = _backup(tree)
    manifest = read_manifest(tree)
    if not manifest:
        raise TreeError(
            f"{backup}: no backup here; nothing to revert (was this tree patched by apply?)"
        )
    steps: list[Step] = []
    edited: list[tuple[str, bytes]] = []
    for file, entry in sorted(manifest.items()):
        path = tree.srt / file
        try:
            current = path.read_bytes()
        except FileNotFoundError:
            current = None
        if current is not None and sha256(current) == entry["original_sha256"]:
            continue
        _stored(tree, f"{ORIGINALS}/{file}", entry["original_sha256"])
        if current is None or sha256(current) != entry["patched_sha256"]:
            if not force:
                patched = backup / PATCHED / file
                line = 1
                if current is not None and patched.is_file():
                    line = _first_difference(patched.read_bytes(), current)
                state = "missing" if current is None else "edited since apply"
                raise TreeError(
                    f"{path}:{line}: {state}; nothing reverted (revert --force restores the "
                    f"original anyway and keeps the edited file in {EDITED_DIR}/)"
                )
            if current is None:
                raise TreeError(
                    f"{path}: missing; restore it by hand, nothing reverted"
                )
            edited.append((file, current))
        steps.append(
            Step(
                file,
                sha256(current),
                f"{STAGED}/{file}",
                entry["original_sha256"],
                f"{ORIGINALS}/{file}",
            )
        )
    try:
        for file, data in edited:
            saved = tree.package / EDITED_DIR / file
            _FS.mkdir(saved.parent)
            write_atomic(saved, data)
        for step in steps:
            _stage(tree, step.before, (tree.srt / step.file).read_bytes())
    except OSError as exc:
        raise _staging_error(tree, exc) from None
    _run(tree, Journal("revert", tuple(steps), None))
    return Reverted([step.file for step in steps], [file for file, _ in edited])


#: where ``revert --force`` keeps the hand-edited files it replaced (outlives the backup)
EDITED_DIR = ".eagle-sizing-edited"


def state(tree: SglangTree) -> str:
    """``pristine``, ``patched`` or ``interrupted``, as the backup folder tells it."""
    if (_backup(tree) / JOURNAL).is_file():
        return "interrupted"
    return "patched" if read_manifest(tree) else "pristine"
