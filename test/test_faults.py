"""apply and revert interrupted at every write point: nothing is lost, the next run finishes.

Every change ``transaction`` makes to the disk goes through ``transaction._FS`` (write a
temporary file, rename, remove, make a folder, remove a folder). A dry run counts those calls;
then, for each index, a forked process runs the command and is SIGKILLed (or gets a full-disk
``OSError``) at exactly that call. Each time, every file must hold its pristine or its patched
bytes, the whole tree must be one or the other unless a journal says a run was interrupted,
and the next command must say what it found and finish the job, leaving no debris.

CI strikes a sample of the write points (``strike_points``): for each kind of write point (the
primitive, and what it writes: the backup's ``originals``, ``staged`` or ``patched`` copies,
the journal, the manifest, the backup folder, or a file or folder of the tree), its first and
its last call. The copies of one file are written by the same code as those of the next, so
the sample keeps every kind and every boundary between the transaction's phases (the last
staged copy, the journal, the first and the last file of the tree, the manifest) while
striking about a fifth to a quarter of the points. ``scripts/faults_every_point.py`` strikes every point
(``SGLANG_EAGLE_SIZING_FAULTS=every``); docs/development/robustness-tests.md says what each
run covers.

Each test runs on both layouts: a package folder (state in ``<sglang>/.eagle-sizing-backup``)
and a fork's git checkout (state under ``.git/``, and ``apply`` adds stand-in fork test files,
one in folders it creates): there ``git status`` must be clean after the last revert.

The tree is small (the version files and the files ``SglangTree.files()`` lists, from the
release wheel) and the rewrite is computed once per tree state (``rewrite_tree`` memoized), so
each forked run only does what is under test: the transaction.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import STAND_IN_TESTS, git_status, make_checkout, write_stand_in_tests
from sglang_eagle_sizing import cli, patch, transaction
from sglang_eagle_sizing.families import BEFORE_REFACTOR
from sglang_eagle_sizing.tree import SglangTree

PRIMITIVES = ("write_temp", "replace", "unlink", "mkdir", "rmdir", "rmtree")
#: ``every``: strike at every write point, not the CI sample (scripts/faults_every_point.py)
EVERY_POINT = os.environ.get("SGLANG_EAGLE_SIZING_FAULTS") == "every"


def small_copy(pristine: Path, target: Path) -> Path:
    """The version files and the files the rules read, nothing else."""
    for file in SglangTree.locate(pristine).files():
        (target / "srt" / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pristine / "srt" / file, target / "srt" / file)
    for name in ("version.py", "_version.py"):
        shutil.copy2(pristine / name, target / name)
    return target


def is_checkout(work: Path) -> bool:
    return (work / "python" / "sglang").is_dir()


def srt_digest(work: Path, temporary: bool = True) -> dict[str, str]:
    """Every file of the tree as the user sees it: under srt/ of a package folder, every file
    but git's own in a checkout (a stray temporary file shows up too, unless ``temporary`` is
    False)."""
    if is_checkout(work):
        files = [p for p in work.rglob("*") if ".git" not in p.relative_to(work).parts]
    else:
        files = list((work / "srt").rglob("*"))
    return {
        str(p.relative_to(work)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(files)
        if p.is_file() and (temporary or not p.name.endswith(".tmp"))
    }


def assert_no_debris(work: Path) -> None:
    """After the last revert: no backup folder, and in a checkout a clean ``git status`` and
    no folder apply created."""
    tree = SglangTree.locate(work)
    assert not tree.backup_dir.exists()
    if is_checkout(work):
        assert git_status(work) == []
        assert not (work / "test" / "registered" / "spec").exists()


def reset(package: Path, source: Path) -> None:
    shutil.rmtree(package)
    shutil.copytree(source, package, symlinks=True)


class Fault:
    """Wraps the writing primitives: counts calls, and strikes at call ``at``."""

    def __init__(self, mode: str, at: int | None = None):
        self.mode = mode  # "count" | "kill" | "torn" | "raise"
        self.at = at
        self.calls: list[str] = []
        #: the path each call writes (for write_temp: the file it stands in for)
        self.paths: list[Path] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in PRIMITIVES:
            monkeypatch.setattr(
                transaction._FS,
                name,
                self._wrap(name, getattr(transaction._Primitives, name)),
            )

    def _wrap(self, name: str, real: Callable) -> Callable:
        def primitive(*args):
            index = len(self.calls)
            self.calls.append(name)
            self.paths.append(
                Path(args[0]) / args[1] if name == "write_temp" else Path(args[-1])
            )
            if index == self.at:
                self._strike(name, args)
            return real(*args)

        return primitive

    def _strike(self, name: str, args: tuple) -> None:
        if self.mode == "raise":
            target = args[0] if name == "write_temp" else args[-1]
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))
        if self.mode == "torn" and name == "write_temp":
            folder, file_name, data, _ = args
            with open(Path(folder) / f".{file_name}.torn.tmp", "wb") as handle:
                handle.write(data[: len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)


def run_forked(
    argv: list[str], fault: Fault | None, monkeypatch: pytest.MonkeyPatch
) -> int | str:
    """Run the CLI in a forked child; its exit code, or "killed"."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 98
        try:
            if fault is not None:
                fault.install(monkeypatch)
            code = cli.main(argv)
        except BaseException:  # noqa: BLE001 - reported as exit code 99
            code = 99
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return "killed"
    return os.WEXITSTATUS(status)


MEMO: dict[tuple, patch.TreeReport] = {}


@pytest.fixture(scope="module", autouse=True)
def stand_ins(tmp_path_factory):
    """apply adds stand-in fork tests to a checkout (also in the forked runs)."""
    folder = write_stand_in_tests(tmp_path_factory.mktemp("inserted_tests"))
    with pytest.MonkeyPatch.context() as local:
        local.setitem(patch.INSERTED_TESTS, BEFORE_REFACTOR.name, folder)
        yield


@pytest.fixture(scope="module", params=["package", "checkout"])
def states(request, pristine, tmp_path_factory, stand_ins):
    """The small pristine tree (a package folder, or a checkout) and the digests of its
    pristine and patched bytes."""
    root = tmp_path_factory.mktemp(f"fault-states-{request.param}")
    package = small_copy(pristine, root / "package" / "sglang")
    source = package
    if request.param == "checkout":
        source = make_checkout(package, root / "source" / "fork")
    patched = root / "patched" / source.name
    shutil.copytree(source, patched, symlinks=True)
    assert cli.main(["apply", "-q", str(patched)]) == 0
    shutil.rmtree(SglangTree.locate(patched).backup_dir)
    return source, srt_digest(source), srt_digest(patched)


@pytest.fixture
def work(states, tmp_path, monkeypatch):
    """A fresh small tree at a fixed path; rewrite_tree memoized by content and the check cache
    filled, both in this process before any fork, so the forked runs only do the transaction.
    """
    source, _, _ = states
    package = tmp_path / source.name
    shutil.copytree(source, package, symlinks=True)
    monkeypatch.setenv(
        "SGLANG_EAGLE_SIZING_CACHE", str(source.parent / "cache")
    )
    real = patch.rewrite_tree

    def rewrite_tree(tree: SglangTree) -> patch.TreeReport:
        key = tuple(sorted(srt_digest(tree.package).items()))
        if key not in MEMO:  # the rules' results are reused; the test files are this tree's
            MEMO[key] = real(tree)
        found = MEMO[key]
        report = patch.TreeReport(tree, found.findings, found.missing, found.results)
        patch.collect_tests(report)
        return report

    monkeypatch.setattr(cli, "rewrite_tree", rewrite_tree)
    assert cli.main(["check", str(package)]) == 1
    assert cli.main(["apply", "-q", str(package)]) == 0
    assert cli.main(["check", str(package)]) == 0
    assert cli.main(["apply", "-q", str(package)]) == 0
    reset(package, source)
    return package


def count_write_points(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> Fault:
    """A dry run of ``argv`` that records every write point (``calls``, ``paths``)."""
    fault = Fault("count")
    with monkeypatch.context() as local:
        fault.install(local)
        assert cli.main(argv) == 0
    return fault


def point_kind(work: Path, name: str, path: Path) -> tuple[str, str]:
    """(primitive, what it writes): the backup's top-level entry (``originals``,
    ``staged``, ``patched``, ``journal.json``, ``manifest.json``; ``.`` the backup folder
    itself), or ``tree`` for a file or folder of the tree."""
    backup = SglangTree.locate(work).backup_dir
    if path == backup or backup in path.parents:
        parts = path.relative_to(backup).parts
        return name, parts[0] if parts else "."
    return name, "tree"


def strike_points(work: Path, counted: Fault) -> list[int]:
    """The indices to strike: every one under ``SGLANG_EAGLE_SIZING_FAULTS=every``, else the
    first and the last call of each kind (``point_kind``)."""
    if EVERY_POINT:
        return list(range(len(counted.calls)))
    first_and_last: dict[tuple[str, str], list[int]] = {}
    for index, (name, path) in enumerate(zip(counted.calls, counted.paths)):
        seen = first_and_last.setdefault(point_kind(work, name, path), [index, index])
        seen[1] = index
    return sorted({index for pair in first_and_last.values() for index in pair})


def assert_each_file_whole(package: Path, pristine: dict, patched: dict) -> None:
    # A temporary file of the write the kill interrupted may stay (next to its file, named
    # .NAME.*.tmp, never importable) until the next run removes it; the files themselves are whole.
    now = srt_digest(package, temporary=False)
    # (a checkout's patched tree has the added test files too)
    assert set(pristine) <= set(now) <= set(patched), "a stray or missing file"
    for name, digest in now.items():
        assert digest in (
            pristine.get(name),
            patched[name],
        ), f"{name}: neither pristine nor patched"


def expected_after_interruption(package: Path, pristine: dict, patched: dict) -> None:
    """No journal: the whole tree is one state. Journal: each file is whole."""
    assert_each_file_whole(package, pristine, patched)
    if transaction.state(SglangTree.locate(package)) != "interrupted":
        assert srt_digest(package) in (pristine, patched)


def test_write_points_are_counted_and_cover_every_primitive(work, monkeypatch):
    apply = count_write_points(["apply", "-q", str(work)], monkeypatch)
    revert = count_write_points(["revert", str(work)], monkeypatch)
    assert apply.calls.count("replace") > len(SglangTree.locate(work).files())
    expected = {"write_temp", "replace", "unlink", "mkdir", "rmtree"}
    if is_checkout(work):  # the folders apply created for a test file are removed
        expected.add("rmdir")
    assert expected <= set(apply.calls) | set(revert.calls)
    # the sample strikes every kind of write point, and each phase boundary
    for counted in (apply, revert):
        sample = strike_points(work, counted)
        kinds = [point_kind(work, n, p) for n, p in zip(counted.calls, counted.paths)]
        assert {kinds[i] for i in sample} == set(kinds)
        assert {0, len(counted.calls) - 1} <= set(sample)
        journal = [i for i, p in enumerate(counted.paths) if p.name == transaction.JOURNAL]
        assert set(journal) <= set(sample)  # written (the commit point), then removed
        if not EVERY_POINT:
            assert len(sample) <= len(counted.calls) // 2, (len(sample), len(counted.calls))
    if is_checkout(work):  # an added test file and a folder made for one are struck
        struck = [(apply.calls[i], apply.paths[i]) for i in strike_points(work, apply)]
        added = {str(work / key) for key in STAND_IN_TESTS}
        assert any(n == "replace" and str(p) in added for n, p in struck), struck
        assert any(n == "mkdir" and point_kind(work, n, p)[1] == "tree" for n, p in struck)


@pytest.mark.parametrize("mode", ["kill", "torn"])
def test_apply_killed_at_every_write_point(work, states, monkeypatch, capfd, mode):
    source, pristine, patched = states
    counted = count_write_points(["apply", "-q", str(work)], monkeypatch)
    strikes = [
        i
        for i in strike_points(work, counted)
        if mode == "kill" or counted.calls[i] == "write_temp"
    ]
    for index in strikes:
        reset(work, source)
        assert (
            run_forked(["apply", "-q", str(work)], Fault(mode, index), monkeypatch)
            == "killed"
        )
        expected_after_interruption(work, pristine, patched)
        interrupted = transaction.state(SglangTree.locate(work)) == "interrupted"
        capfd.readouterr()
        # check says what it found and writes nothing
        before = srt_digest(work)
        assert run_forked(["check", str(work)], None, monkeypatch) in (
            0,
            1,
        )
        err = capfd.readouterr().err
        assert ("interrupted apply" in err) == interrupted, (index, err)
        assert srt_digest(work) == before
        if mode == "torn":  # revert right away: finishes the apply, then reverts
            started = transaction.state(SglangTree.locate(work)) != "pristine"
            assert run_forked(["revert", str(work)], None, monkeypatch) == (
                0 if started else 2
            )
            assert srt_digest(work) == pristine, index
            assert_no_debris(work)
            continue
        # the next apply finishes the job
        assert run_forked(["apply", "-q", str(work)], None, monkeypatch) == 0, index
        assert srt_digest(work) == patched, index
        assert transaction.state(SglangTree.locate(work)) == "patched"
        assert ("interrupted apply" in capfd.readouterr().err) == interrupted
        # and what it saved reverts to the pristine bytes
        assert run_forked(["revert", str(work)], None, monkeypatch) == 0, index
        assert srt_digest(work) == pristine, index
        assert_no_debris(work)


def test_revert_killed_at_every_write_point(work, states, monkeypatch, capfd):
    _, pristine, patched = states
    assert cli.main(["apply", "-q", str(work)]) == 0
    applied = work.parent / "applied"
    shutil.copytree(work, applied)
    counted = count_write_points(["revert", str(work)], monkeypatch)
    assert len(counted.calls) > 0
    for index in strike_points(work, counted):
        reset(work, applied)
        assert (
            run_forked(["revert", str(work)], Fault("kill", index), monkeypatch)
            == "killed"
        )
        expected_after_interruption(work, pristine, patched)
        interrupted = transaction.state(SglangTree.locate(work)) == "interrupted"
        capfd.readouterr()
        code = run_forked(["revert", str(work)], None, monkeypatch)
        err = capfd.readouterr().err
        assert ("interrupted revert" in err) == interrupted, (index, err)
        if code == 2:  # killed after the revert was complete: nothing left to revert
            assert "nothing to revert" in err, (index, err)
        else:
            assert code == 0, (index, err)
        assert srt_digest(work) == pristine, index
        assert_no_debris(work)
        # and the tree can be patched again
        assert run_forked(["apply", "-q", str(work)], None, monkeypatch) == 0
        assert srt_digest(work) == patched, index


@pytest.mark.parametrize("command", ["apply", "revert"])
def test_full_disk_at_every_write_point_rolls_back_or_completes(
    work, states, monkeypatch, capfd, command
):
    source, pristine, patched = states
    if command == "revert":
        assert cli.main(["apply", "-q", str(work)]) == 0
        start = work.parent / "applied"
        shutil.copytree(work, start)
    else:
        start = source
    argv = [command, str(work)]
    counted = count_write_points(argv, monkeypatch)
    before_state, done_state = (
        (pristine, patched) if command == "apply" else (patched, pristine)
    )
    for index in strike_points(work, counted):
        reset(work, start)
        capfd.readouterr()
        code = run_forked(argv, Fault("raise", index), monkeypatch)
        err = capfd.readouterr().err
        if (
            code == 0
        ):  # only the removal of leftovers failed, after the run was complete
            assert (
                srt_digest(work) == done_state
                and transaction.state(SglangTree.locate(work)) != "interrupted"
            )
            continue
        assert code == 2, (index, code, err)
        lines = err.strip().splitlines()
        assert (
            len(lines) == 1
            and lines[0].startswith("error: ")
            and "No space left" in lines[0]
        ), lines
        now = srt_digest(work)
        # rolled back, or every file written and only the bookkeeping failed
        assert now in (before_state, done_state), index
        if now == done_state:
            assert f"run {command} again" in err, err
        assert run_forked(argv, None, monkeypatch) in (0, 2)
        assert srt_digest(work) == done_state, index


def test_no_write_point_left_unwrapped(work, monkeypatch):
    """Any other way of writing would escape the fault tests: the module writes only through
    the primitives (a full disk on every primitive leaves the tree untouched)."""

    def refuse(*args):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(args[-1]))

    for name in PRIMITIVES:
        monkeypatch.setattr(transaction._FS, name, refuse)
    def outside_git(path: Path) -> bool:  # a checkout's lock lives under .git, by design
        return ".git" not in path.relative_to(work).parts

    before = {
        str(p): p.stat().st_mtime_ns for p in work.rglob("*") if outside_git(p)
    }
    assert cli.main(["apply", "-q", str(work)]) == 2
    assert {
        str(p): p.stat().st_mtime_ns
        for p in work.rglob("*")
        if p.name != transaction.LOCK and outside_git(p)
    } == {k: v for k, v in before.items()}
