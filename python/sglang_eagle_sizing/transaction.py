"""Writing a patch into a tree, and taking it out again, without losing anything.

Files are named by their path from the tree's root (``SglangTree.root``: the checkout root, or
the package's parent), so one transaction covers SGLang's files and the fork's test files the
patch adds (whose original is *absent*: ``None`` below). Everything this module keeps lives in
the tree's backup folder (``SglangTree.backup_dir``: under the git directory of a git checkout,
where ``git status`` does not see it; else ``<sglang>/.eagle-sizing-backup/``):

- ``originals/<file>``: the bytes of each file before the first ``apply`` (none for an added file);
- ``patched/<file>``: the bytes ``apply`` wrote (to name the line a later hand edit changed);
- ``manifest.json``: per file, the SHA-256 of its original (``null``: absent) and of its patched
  bytes, and for an added file the folders ``apply`` created for it;
- ``journal.json``: only while a run replaces files (see below);
- ``edited/<file>``: a hand-edited file ``--force`` replaced, kept for the user.

A run that replaces files is a transaction. It first stages every byte it will need (originals,
the new contents) in the backup folder, then writes ``journal.json`` (file by file: SHA-256 and
stored copy of the bytes before and after, ``null`` for absent) atomically: that is the commit
point. Only then does it replace, create or remove the tree's files, each atomically (temporary
file, ``fsync``, ``os.replace``), then it writes the manifest and removes the journal. So
whatever stops a run:

- before the journal is written, no tree file has been touched; what was staged is removed by
  the next ``apply`` or ``revert`` (``recover``), as is a backup folder a ``revert`` was removing;
- after, the journal says which state each file must reach and holds its bytes: the next
  ``apply`` or ``revert`` finishes the interrupted run first (``recover``), ``check`` reports it.

An exception inside the run (a full disk, ...) rolls the replaced files back at once, and so
does an interrupt (SIGINT, or SIGTERM once ``handle_signals`` is installed): what the run staged
is removed too, so an apply stopped before it finished leaves no backup behind. Every file
write, rename and removal goes through the primitives below (``_FS``), which the fault-injection
tests count and interrupt one by one. A lock (``SglangTree.lock_file``, ``flock``) keeps two runs
off one tree.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sglang_eagle_sizing.tree import (
    BACKUP_DIR,
    EDITED_DIR,
    LOCK,
    SglangTree,
    TreeError,
    _git,
    display,
)

__all__ = ["BACKUP_DIR", "EDITED_DIR", "LOCK"]

MANIFEST = "manifest.json"
JOURNAL = "journal.json"
ORIGINALS, PATCHED, STAGED, EDITED = "originals", "patched", "staged", "edited"

Manifest = dict[str, dict]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(data: bytes | None) -> str | None:
    """SHA-256 of the bytes, ``None`` for an absent file."""
    return None if data is None else sha256(data)


@dataclass(frozen=True)
class FileChange:
    """One file ``apply`` writes: its path from the tree's root, its bytes now (``None``: the
    patch adds it) and the bytes to write."""

    key: str
    old: bytes | None
    new: bytes


# -- interrupts -----------------------------------------------------------------------
class Interrupted(KeyboardInterrupt):
    """SIGINT (Ctrl-C) or SIGTERM stopped a run. ``what`` says what that left, once the run
    has rolled back or finished (empty: the run had not written anything)."""

    def __init__(self, signum: int = signal.SIGINT, what: str = ""):
        super().__init__(what)
        self.signum = signum
        self.what = what

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports it (130, 143)."""
        return 128 + self.signum


#: while not None, a run is rolling back or finishing: signals are recorded here, not raised
_DEFERRED: list[int] | None = None


def _on_signal(signum: int, frame: object) -> None:
    if _DEFERRED is not None:
        _DEFERRED.append(signum)
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def handle_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise ``Interrupted`` (which the transaction
    rolls back on, and the CLI reports in one line); the previous handlers come back after."""
    previous = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, _on_signal)
    except ValueError:  # not the main thread: leave the handlers alone
        pass
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _deferred() -> Iterator[list[int]]:
    """Signals arriving within the block wait (rolling back or finishing must not be cut
    short); the list they are recorded in is yielded."""
    global _DEFERRED
    outer = _DEFERRED
    _DEFERRED = [] if outer is None else outer
    try:
        yield _DEFERRED
    finally:
        _DEFERRED = outer


def _signum(exc: BaseException) -> int:
    return exc.signum if isinstance(exc, Interrupted) else signal.SIGINT


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
    def rmdir(path: Path) -> None:
        """Remove an empty folder (an ``OSError`` if it is not empty)."""
        with contextlib.suppress(FileNotFoundError):
            path.rmdir()

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
    """Replace ``path`` with ``data`` in one step, keeping its permission bits. An ``OSError``
    names ``path`` (never the temporary file it is written through)."""
    try:
        mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
        tmp = _FS.write_temp(path.parent, path.name, data, mode)
    except OSError as exc:
        raise _naming(exc, path) from None
    try:
        _FS.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, path) from None
        raise


def _naming(exc: OSError, path: Path) -> OSError:
    """The same error, about ``path``."""
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


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
    path = tree.lock_file
    attempts = 0
    while True:
        try:
            path.parent.mkdir(
                parents=True, exist_ok=True
            )  # a git checkout's state folder
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:
            # the run that held the lock removed its empty state folder in between
            attempts += 1
            if attempts < 100:
                continue
            raise TreeError(
                f"{display(path)}: cannot create the lock file (its folder keeps going "
                "away); nothing written"
            ) from None
        except OSError as exc:
            raise TreeError(
                f"{display(path)}: cannot create the lock file ({exc.strerror}); nothing "
                "written"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise TreeError(
                f"{display(tree.package)}: another sglang-eagle-sizing run (pid {holder}) is "
                "working on this tree; nothing written, try again when it has finished"
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
        _remove_empty_state_dir(tree)


def _remove_empty_state_dir(tree: SglangTree) -> None:
    """A git checkout's state folder goes once nothing is left in it (no backup, no kept
    edited file): a refused run or a revert leaves no empty folder under the git directory."""
    if tree.git_dir is None:
        return
    folder = tree.state_dir
    while folder != tree.git_dir and tree.git_dir in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


# -- the backup folder ----------------------------------------------------------------
def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else exc
        raise TreeError(
            f"{display(path)}: unreadable {what} ({reason}); nothing written"
        ) from None
    if not isinstance(value, dict):
        raise TreeError(
            f"{display(path)}: unreadable {what} (not an object); nothing written"
        )
    return value


def read_manifest(tree: SglangTree) -> Manifest:
    return _read_json(tree.backup_dir / MANIFEST, "backup manifest")


def saved_original(tree: SglangTree, key: str) -> Path:
    """Where ``apply`` saved the original bytes of the file ``key``."""
    return tree.backup_dir / ORIGINALS / key


def _stored(tree: SglangTree, relative: str, expected_sha: str) -> bytes:
    path = tree.backup_dir / relative
    try:
        data = path.read_bytes()
    except OSError:
        raise TreeError(
            f"{display(path)}: the saved copy is missing; nothing written"
        ) from None
    if sha256(data) != expected_sha:
        raise TreeError(f"{display(path)}: the saved copy is corrupt; nothing written")
    return data


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TreeError(
            f"{display(path)}: cannot read ({exc.strerror}); nothing written"
        ) from None


def _current_sha(path: Path) -> str | None:
    return digest(_read(path))


def _first_difference(expected: bytes, actual: bytes) -> int:
    """The 1-based line of ``actual`` where it first differs from ``expected``."""
    old = expected.decode("utf-8", "replace").splitlines()
    new = actual.decode("utf-8", "replace").splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, _, _, start, _ in matcher.get_opcodes():
        if tag != "equal":
            return start + 1
    return min(len(old), len(new)) + 1


def _missing_folders(tree: SglangTree, key: str) -> list[str]:
    """The folders (from the root, deepest first) a new file ``key`` needs created."""
    missing = []
    folder = tree.path(key).parent
    while folder != tree.root and not folder.is_dir():
        missing.append(folder.relative_to(tree.root).as_posix())
        folder = folder.parent
    return missing


def _remove_empty_folders(tree: SglangTree, folders: tuple[str, ...]) -> None:
    """Remove the folders a run created for a file it added, deepest first, each only if it
    is empty (the user may have put a file of their own there)."""
    for folder in folders:
        path = tree.path(folder)
        if not path.is_dir():
            continue
        try:
            _FS.rmdir(path)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            return


# -- the journal ----------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """One file of a transaction: its bytes before and after (``None``: absent), and where
    each is stored."""

    file: str  # path from the tree's root
    before_sha256: str | None
    before: str | None  # path of the stored copy, relative to the backup folder
    after_sha256: str | None
    after: str | None
    #: folders created for the file where it is added, removed where it is taken out
    folders: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {**self.__dict__, "folders": list(self.folders)}


@dataclass(frozen=True)
class Journal:
    operation: str  # "apply" | "revert"
    steps: tuple[Step, ...]
    #: the manifest once the run is done (``None``: no backup left, the tree is pristine)
    manifest: Manifest | None

    def to_json(self) -> dict:
        return {
            "operation": self.operation,
            "steps": [step.to_json() for step in self.steps],
            "manifest": self.manifest,
        }

    @classmethod
    def read(cls, tree: SglangTree) -> Journal | None:
        value = _read_json(tree.backup_dir / JOURNAL, "journal")
        if not value:
            return None
        try:
            steps = tuple(
                Step(**{**step, "folders": tuple(step.get("folders", ()))})
                for step in value["steps"]
            )
            return cls(value["operation"], steps, value["manifest"])
        except (KeyError, TypeError) as exc:
            raise TreeError(
                f"{display(tree.backup_dir / JOURNAL)}: unreadable journal ({exc})"
            ) from None


def describe(tree: SglangTree) -> str | None:
    """One line on an interrupted run, if the tree holds one."""
    journal = Journal.read(tree)
    if journal is None:
        return None
    done = sum(_current_sha(tree.path(s.file)) == s.after_sha256 for s in journal.steps)
    return (
        f"{display(tree.backup_dir / JOURNAL)}: an interrupted {journal.operation} "
        f"({done} of {len(journal.steps)} files written)"
    )


def _put(tree: SglangTree, path: Path, stored: str | None, sha: str | None) -> None:
    """Bring ``path`` to the stored bytes, or remove it (``sha`` None)."""
    if sha is None:
        _FS.unlink(path)
        return
    data = _stored(tree, stored, sha)
    if not path.parent.is_dir():
        _FS.mkdir(path.parent)
    write_atomic(path, data)


def _write_files(tree: SglangTree, journal: Journal) -> None:
    """Bring every file of the journal to its ``after`` bytes."""
    for step in journal.steps:
        path = tree.path(step.file)
        current = _current_sha(path)
        if current != step.after_sha256:
            if current != step.before_sha256:
                raise TreeError(
                    f"{display(path)}: changed while a {journal.operation} was interrupted; "
                    f"left as it is with {display(tree.backup_dir / JOURNAL)} (revert or "
                    "restore it by hand)"
                )
            _put(tree, path, step.after, step.after_sha256)
        _remove_stale_temps(path)
        if step.after_sha256 is None:
            _remove_empty_folders(tree, step.folders)


def _complete(tree: SglangTree, journal: Journal) -> None:
    """Every file is written: record the new state, then drop the journal."""
    backup = tree.backup_dir
    if journal.manifest is None:
        _FS.unlink(backup / MANIFEST)
        _FS.unlink(backup / JOURNAL)
        # done: a folder left without manifest or journal is removed by the next run
        with contextlib.suppress(OSError):
            _FS.rmtree(backup)
    else:
        _write_json(backup / MANIFEST, journal.manifest)
        _FS.unlink(backup / JOURNAL)
        with contextlib.suppress(OSError):
            _FS.rmtree(backup / STAGED)


def _roll_back(tree: SglangTree, journal: Journal) -> None:
    for step in journal.steps:
        path = tree.path(step.file)
        if _current_sha(path) == step.after_sha256 != step.before_sha256:
            _put(tree, path, step.before, step.before_sha256)
        _remove_stale_temps(path)
        if step.before_sha256 is None:
            _remove_empty_folders(tree, step.folders)
    _FS.unlink(tree.backup_dir / JOURNAL)


def _remove_debris(tree: SglangTree) -> None:
    """What a run killed before its commit point, or while cleaning up, left behind: a backup
    folder without manifest (staged by an apply that never started writing, or half removed
    by a finished revert), or the staged copies of a finished run."""
    backup = tree.backup_dir
    if not backup.is_dir():
        return
    if not (backup / MANIFEST).is_file():
        _FS.rmtree(backup)
    elif (backup / STAGED).exists():
        _FS.rmtree(backup / STAGED)


def recover(tree: SglangTree) -> Journal | None:
    """Finish a run that was interrupted after its commit point (and return its journal), or
    remove what a run interrupted before it left behind."""
    journal = Journal.read(tree)
    with _deferred() as pending:
        if journal is None:
            try:
                _remove_debris(tree)
            except OSError as exc:
                raise TreeError(
                    f"{_where(exc, tree.backup_dir)}: cannot remove what an interrupted run "
                    f"left ({exc.strerror}); nothing written"
                ) from None
        else:
            _write_files(tree, journal)
            _complete(tree, journal)
    if pending:
        done = "" if journal is None else f"; the interrupted {journal.operation} was finished"
        raise Interrupted(pending[0], f"nothing written{done}")
    return journal


def _where(exc: OSError, default: Path) -> str:
    """The file an ``OSError`` is about, as the user reads it."""
    return display(Path(exc.filename)) if exc.filename else display(default)


def _discard_staging(tree: SglangTree) -> None:
    """After a run stopped before its commit point or rolled back: remove what it staged
    (the whole backup folder when no earlier apply left a manifest). Best effort."""
    with contextlib.suppress(OSError):
        _remove_debris(tree)


def _run(tree: SglangTree, journal: Journal) -> None:
    """Commit ``journal`` and carry it out; on an exception while files are being replaced,
    put them back as they were. A failure after that leaves the journal for the next run.
    """
    operation = journal.operation
    try:
        try:
            _write_json(tree.backup_dir / JOURNAL, journal.to_json())
        except OSError as exc:
            raise _staging_error(tree, exc) from None
        _write_files(tree, journal)
    except BaseException as exc:
        with _deferred():  # a second Ctrl-C waits for the roll-back
            try:
                if (tree.backup_dir / JOURNAL).exists():
                    _roll_back(tree, journal)
            except (OSError, TreeError):
                raise TreeError(
                    f"{display(tree.root)}: {operation} failed ({_reason(exc)}) and could "
                    f"not be rolled back; {display(tree.backup_dir / JOURNAL)} holds every "
                    f"byte: run {operation} again to finish it"
                ) from None
            _discard_staging(tree)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(
                _signum(exc), f"{operation} rolled back, nothing changed"
            ) from None
        if isinstance(exc, OSError):
            raise TreeError(
                f"{_where(exc, tree.root)}: cannot write ({exc.strerror}); "
                f"{operation} rolled back, nothing changed"
            ) from None
        raise
    with _deferred() as pending:  # every file is written: record it whole
        try:
            _complete(tree, journal)
        except OSError as exc:
            raise TreeError(
                f"{_where(exc, tree.backup_dir)}: every file is written but the backup "
                f"could not be updated ({exc.strerror}); run {operation} again to finish"
            ) from None
    if pending:
        raise Interrupted(pending[0], f"{operation} had finished")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return f"{_where(exc, Path('.'))}: {exc.strerror}"
    return str(exc) or type(exc).__name__


def _stage(tree: SglangTree, relative: str, data: bytes) -> None:
    path = tree.backup_dir / relative
    _FS.mkdir(path.parent)
    write_atomic(path, data)


def _staging_error(tree: SglangTree, exc: OSError) -> TreeError:
    return TreeError(
        f"{_where(exc, tree.backup_dir)}: cannot save a copy ({exc.strerror}); "
        "nothing written"
    )


def _stopped_staging(tree: SglangTree, exc: BaseException) -> BaseException:
    """What staging that failed or was interrupted raises, once its copies are removed."""
    with _deferred():
        _discard_staging(tree)
    if isinstance(exc, OSError):
        return _staging_error(tree, exc)
    if isinstance(exc, KeyboardInterrupt):
        return Interrupted(_signum(exc), "nothing written")
    return exc


# -- apply ----------------------------------------------------------------------------
def apply(
    tree: SglangTree, changes: list[FileChange], force: bool = False
) -> list[str]:
    """Write the changes; return the hand-edited files ``force`` saved aside."""
    if not changes:
        return []
    manifest = read_manifest(tree)
    edited = _edited_since_apply(tree, manifest, changes)
    if edited and not force:
        key, line = edited[0]
        raise TreeError(
            f"{display(tree.path(key))}:{line}: edited since apply; nothing written "
            "(apply --force re-patches it and keeps the edited file in "
            f"{display(tree.backup_dir / EDITED)}/)"
        )
    steps: list[Step] = []
    new_manifest = {key: dict(entry) for key, entry in manifest.items()}
    try:
        _FS.mkdir(tree.backup_dir)
        for key, _ in edited:
            _stage(tree, f"{EDITED}/{key}", tree.path(key).read_bytes())
        for change in changes:
            old_sha, new_sha = digest(change.old), sha256(change.new)
            entry = new_manifest.get(change.key)
            folders = _missing_folders(tree, change.key) if change.old is None else []
            if entry is None or entry["original_sha256"] == old_sha:
                entry = {"original_sha256": old_sha}
                if change.old is None:
                    entry["created_folders"] = folders
                else:
                    _stage(tree, f"{ORIGINALS}/{change.key}", change.old)
            before = None
            if change.old is not None:
                before = f"{STAGED}/{change.key}"
                _stage(tree, before, change.old)
            _stage(tree, f"{PATCHED}/{change.key}", change.new)
            entry["patched_sha256"] = new_sha
            new_manifest[change.key] = entry
            steps.append(
                Step(
                    change.key,
                    old_sha,
                    before,
                    new_sha,
                    f"{PATCHED}/{change.key}",
                    tuple(folders),
                )
            )
    except (OSError, KeyboardInterrupt) as exc:
        raise _stopped_staging(tree, exc) from None
    _run(tree, Journal("apply", tuple(steps), new_manifest))
    return [key for key, _ in edited]


def _edited_since_apply(
    tree: SglangTree, manifest: Manifest, changes: list[FileChange]
) -> list[tuple[str, int]]:
    """Files apply patched before that now hold neither the original nor the patch."""
    edited = []
    for change in changes:
        entry = manifest.get(change.key)
        current = digest(change.old)
        if entry is None or current in (
            entry["original_sha256"],
            entry["patched_sha256"],
        ):
            continue
        patched = tree.backup_dir / PATCHED / change.key
        line = 1
        if patched.is_file() and change.old is not None:
            line = _first_difference(patched.read_bytes(), change.old)
        edited.append((change.key, line))
    return edited


# -- revert ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Reverted:
    #: files given back their original bytes (or removed: the files apply added)
    restored: list[str]
    #: hand-edited files ``force`` replaced, kept under ``SglangTree.kept_edited_dir``
    edited: list[str]
    #: of ``restored``, the files apply had added (now removed)
    removed: list[str]


def revert(tree: SglangTree, force: bool = False) -> Reverted:
    """Restore the original bytes of every file apply changed; remove the files it added."""
    backup = tree.backup_dir
    manifest = read_manifest(tree)
    if not manifest:
        raise TreeError(
            f"{display(tree.package)}: no backup of an apply here "
            f"({display(backup)}); nothing to revert"
        )
    steps: list[Step] = []
    edited: list[tuple[str, bytes]] = []
    for key, entry in sorted(manifest.items()):
        path = tree.path(key)
        current = _read(path)
        original_sha = entry["original_sha256"]
        if digest(current) == original_sha:
            continue
        if original_sha is not None:
            _stored(tree, f"{ORIGINALS}/{key}", original_sha)
        if digest(current) != entry["patched_sha256"]:
            if not force:
                patched = backup / PATCHED / key
                line = 1
                if current is not None and patched.is_file():
                    line = _first_difference(patched.read_bytes(), current)
                state = "missing" if current is None else "edited since apply"
                raise TreeError(
                    f"{display(path)}:{line}: {state}; nothing reverted (revert --force "
                    "restores the original anyway and keeps the edited file in "
                    f"{display(tree.kept_edited_dir)}/)"
                )
            if current is None:
                raise TreeError(
                    f"{display(path)}: missing; restore it by hand, nothing reverted"
                )
            edited.append((key, current))
        steps.append(
            Step(
                key,
                digest(current),
                f"{STAGED}/{key}",
                original_sha,
                None if original_sha is None else f"{ORIGINALS}/{key}",
                tuple(entry.get("created_folders", ())),
            )
        )
    try:
        for key, data in edited:
            saved = tree.kept_edited_dir / key
            _FS.mkdir(saved.parent)
            write_atomic(saved, data)
        for step in steps:
            _stage(tree, step.before, tree.path(step.file).read_bytes())
    except (OSError, KeyboardInterrupt) as exc:
        raise _stopped_staging(tree, exc) from None
    _run(tree, Journal("revert", tuple(steps), None))
    return Reverted(
        [step.file for step in steps],
        [key for key, _ in edited],
        [step.file for step in steps if step.after_sha256 is None],
    )


# -- a backup the fork has committed past ---------------------------------------------
def _git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def committed_files(tree: SglangTree, manifest: Manifest) -> list[str] | None:
    """On a git checkout whose ``HEAD`` no longer holds the bytes any file had before the
    last apply (the patched files, or what later merges made of them, are committed; the
    files apply added are tracked), those files; else None: the backup still undoes an
    apply that is not committed."""
    if tree.git_dir is None or not manifest:
        return None
    listing = _git(tree.root, "ls-tree", "--full-name", "HEAD", "--", *sorted(manifest))
    if listing is None:  # no commit yet
        return None
    in_head = {}
    for line in listing.splitlines():
        meta, _, name = line.partition("\t")
        in_head[name] = meta.split()[2]
    prefix = tree.git_prefix + "/" if tree.git_prefix else ""
    for key, entry in manifest.items():
        blob = in_head.get(prefix + key)
        if blob is None:
            return None  # an added file not committed, or a file git does not track
        if entry["original_sha256"] is None:
            continue
        original = tree.backup_dir / ORIGINALS / key
        try:
            if _git_blob_sha(original.read_bytes()) == blob:
                return None  # HEAD still holds the bytes from before apply
        except OSError:
            return None
    return sorted(manifest)


def drop_backup(tree: SglangTree) -> None:
    """Forget the backup of an apply the fork has committed: git holds that history now."""
    try:
        with _deferred():
            _FS.rmtree(tree.backup_dir)
    except OSError as exc:
        raise TreeError(
            f"{_where(exc, tree.backup_dir)}: cannot remove the backup of a committed "
            f"apply ({exc.strerror}); nothing written"
        ) from None


def state(tree: SglangTree) -> str:
    """``pristine``, ``patched`` or ``interrupted``, as the backup folder tells it."""
    if (tree.backup_dir / JOURNAL).is_file():
        return "interrupted"
    return "patched" if read_manifest(tree) else "pristine"
