"""What a fork maintainer sees when something goes wrong: never a traceback.

- Ctrl-C (SIGINT) or SIGTERM while ``apply`` or ``revert`` writes: one ``interrupted:`` line,
  exit 130 / 143, the tree as it was, and no backup debris under ``.git/sglang-eagle-sizing``;
- a file that cannot be written: one ``error:`` line naming that file from where the command
  runs (not the temporary file it is written through), exit 2, nothing left behind;
- output paths (``pr --series FILE``, ``build-wheel --output FILE``) refused before the slow
  work; a syntax error named at Python's own line;
- one cache variable in every help text; the summary of check, apply and revert on stderr;
- after the patch is committed, an ``apply`` with nothing to do keeps what ``revert`` needs, and
  a ``revert`` without a backup says to use git;
- relative paths in journal messages; the ``warning:`` line of ``--allow-untested-version``.

Interrupts and write failures are injected at the transaction's write primitives
(``transaction._FS``) in a forked child (a SIGTERM there would end pytest itself), on a small
git checkout of 0.5.11 whose rewrite is computed once in the parent.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import signal
import sys
import traceback
from pathlib import Path

import pytest
from conftest import git, git_status, make_checkout, write_stand_in_tests
from sglang_eagle_sizing import cli, patch, series, transaction, wheel
from sglang_eagle_sizing.families import BEFORE_REFACTOR
from sglang_eagle_sizing.tree import SglangTree

V2 = "python/sglang/srt/speculative/eagle_worker_v2.py"


def small_copy(pristine: Path, target: Path) -> Path:
    """The version files and the files the rules read."""
    for file in SglangTree.locate(pristine).files():
        (target / "srt" / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pristine / "srt" / file, target / "srt" / file)
    for name in ("version.py", "_version.py"):
        shutil.copy2(pristine / name, target / name)
    return target


def files_of(work: Path) -> dict[str, bytes]:
    """Every file of the checkout but git's own."""
    return {
        str(p.relative_to(work)): p.read_bytes()
        for p in sorted(work.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(work).parts
    }


MEMO: dict[tuple, patch.TreeReport] = {}


@pytest.fixture(scope="module")
def source(pristine, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("user-errors")
    package = small_copy(pristine, root / "package" / "sglang")
    return make_checkout(package, root / "source" / "fork")


@pytest.fixture
def work(source, tmp_path, monkeypatch, tmp_path_factory) -> Path:
    """A fresh copy of the small checkout, the cwd; the rewrite memoized in this process
    (before any fork) so that a forked run only does the transaction."""
    folder = write_stand_in_tests(tmp_path_factory.mktemp("inserted_tests"))
    monkeypatch.setitem(patch.INSERTED_TESTS, BEFORE_REFACTOR.name, folder)
    monkeypatch.setenv("SGLANG_EAGLE_SIZING_CACHE", str(source.parent / "cache"))
    real = patch.rewrite_tree

    def rewrite_tree(tree: SglangTree) -> patch.TreeReport:
        key = tuple(sorted((f, tree.read(f)) for f in tree.files()))
        if key not in MEMO:
            MEMO[key] = real(tree)
        found = MEMO[key]
        report = patch.TreeReport(tree, found.findings, found.missing, found.results)
        patch.collect_tests(report)
        return report

    monkeypatch.setattr(cli, "rewrite_tree", rewrite_tree)
    checkout = tmp_path / "fork"
    shutil.copytree(source, checkout, symlinks=True)
    monkeypatch.chdir(checkout)
    rewrite_tree(SglangTree.locate(checkout))  # here, not in each forked child
    return checkout


@pytest.fixture
def patched_files(work) -> dict[str, bytes]:
    """The checkout's files once patched (the tree put back as it was after)."""
    before = files_of(work)
    assert cli.main(["apply", "-q", "."]) == 0
    after = files_of(work)
    assert cli.main(["revert", "."]) == 0
    assert files_of(work) == before
    return after


def strike(monkeypatch, primitive: str, when, action) -> None:
    """Make ``transaction._FS.<primitive>`` run ``action(args)`` at the first call for which
    ``when(args)`` holds, instead of doing its work."""
    real = getattr(transaction._Primitives, primitive)
    done = []

    def wrapped(*args):
        if not done and when(args):
            done.append(True)
            action(args)
        return real(*args)

    monkeypatch.setattr(transaction._FS, primitive, wrapped)


def interrupt(args) -> None:
    raise KeyboardInterrupt  # what Ctrl-C raises in Python


def terminate(args) -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def run_forked(argv: list[str], arm=None) -> tuple[int | str, str, str]:
    """The CLI in a forked child (``arm()`` installs the fault there): (exit code, or the
    signal that ended it, stdout, stderr). An exception escaping ``main`` prints its
    traceback, as Python would."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 98
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), write_through=True)
            sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", closefd=False), write_through=True)
            with pytest.MonkeyPatch.context() as local:
                if arm is not None:
                    arm(local)
                code = cli.main(argv)
        except BaseException:  # noqa: BLE001 - the traceback a user would see
            traceback.print_exc()
            code = 99
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    with os.fdopen(out_r) as out, os.fdopen(err_r) as err:
        stdout, stderr = out.read(), err.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name, stdout, stderr
    return os.WEXITSTATUS(status), stdout, stderr


def state_dir(work: Path) -> Path:
    return work / ".git" / "sglang-eagle-sizing"


def in_backup(args) -> bool:
    return "sglang-eagle-sizing" in str(args[0] if len(args) > 1 else args[-1])


def in_tree(args) -> bool:
    return not in_backup(args)


# -- Ctrl-C and SIGTERM ---------------------------------------------------------------
@pytest.mark.parametrize(
    "primitive, when, phase",
    [
        ("write_temp", in_backup, "while it saves the originals"),
        ("replace", in_tree, "while it replaces the tree's files"),
    ],
)
@pytest.mark.parametrize("action, code", [(interrupt, 130), (terminate, 143)])
def test_an_interrupted_apply_rolls_back_in_one_line_and_leaves_nothing(
    work, primitive, when, phase, action, code
):
    before = files_of(work)
    result, out, err = run_forked(
        ["apply", "."], lambda mp: strike(mp, primitive, when, action)
    )
    assert "Traceback" not in err, err
    assert result == code, (result, err)
    assert err.splitlines() == [err.splitlines()[0]] and err.startswith("interrupted: "), err
    assert "nothing" in err  # "nothing written" / "apply rolled back, nothing changed"
    assert files_of(work) == before, phase
    assert git_status(work) == []
    assert not state_dir(work).exists(), list(state_dir(work).rglob("*"))


def test_an_interrupted_revert_rolls_back_and_revert_works_after(work, patched_files):
    assert cli.main(["apply", "-q", "."]) == 0
    result, _, err = run_forked(
        ["revert", "."], lambda mp: strike(mp, "replace", in_tree, interrupt)
    )
    assert (result, err) == (130, "interrupted: revert rolled back, nothing changed\n")
    assert files_of(work) == patched_files
    assert not (state_dir(work) / "backup" / "journal.json").exists()
    assert not (state_dir(work) / "backup" / "staged").exists()
    assert cli.main(["revert", "."]) == 0
    assert git_status(work) == [] and not state_dir(work).exists()


def test_an_interrupt_before_any_write_says_nothing_was_written(work, monkeypatch):
    def stop(tree):
        raise KeyboardInterrupt

    result, out, err = run_forked(
        ["apply", "."], lambda mp: mp.setattr(cli, "rewrite_tree", stop)
    )
    assert (result, out, err) == (130, "", "interrupted: nothing written\n")
    assert git_status(work) == [] and not state_dir(work).exists()


# -- a file that cannot be written ----------------------------------------------------
def immutable(path: str):
    """``os.replace`` onto a file with the immutable attribute (``chattr +i``) fails so: the
    error names the temporary file first."""

    def action(args):
        source, target = args
        raise PermissionError(
            errno.EPERM, os.strerror(errno.EPERM), str(source), None, str(target)
        )

    return lambda mp: strike(
        mp, "replace", lambda args: in_tree(args) and str(args[1]).endswith(path), action
    )


def test_a_file_that_cannot_be_written_is_named_as_the_user_knows_it(work):
    before = files_of(work)
    result, out, err = run_forked(["apply", "."], immutable(V2))
    assert "Traceback" not in err, err
    assert (result, out) == (2, "")
    assert err == (
        f"error: {V2}: cannot write (Operation not permitted); apply rolled back, nothing "
        "changed\n"
    )
    assert ".tmp" not in err and str(work) not in err
    assert files_of(work) == before and git_status(work) == []
    # the backup of an apply that wrote nothing is gone with it
    assert not state_dir(work).exists(), list(state_dir(work).rglob("*"))


def test_a_backup_that_cannot_be_saved_leaves_no_folder(work):
    def full(args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(args[0]))

    result, _, err = run_forked(
        ["apply", "."], lambda mp: strike(mp, "write_temp", in_backup, full)
    )
    assert result == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: .git/sglang-eagle-sizing/backup/originals/python/sglang/")
    assert "cannot save a copy (No space left on device); nothing written" in err
    assert git_status(work) == [] and not state_dir(work).exists()


def test_an_os_error_no_command_expected_is_one_line(work, monkeypatch):
    def unreadable(tree, cache=None):
        raise PermissionError(errno.EACCES, "Permission denied", str(work / V2))

    monkeypatch.setattr(cli, "check_tree", unreadable)
    code, out, err = _run("check", ".")
    assert (code, out, err) == (2, "", f"error: {V2}: Permission denied\n")


# -- output paths, before the slow work -----------------------------------------------
def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _never(*args, **kwargs):
    raise AssertionError("the slow work ran before the output path was checked")


def test_pr_series_into_a_file_is_refused_before_the_series_is_computed(work, monkeypatch):
    (work / "notes.txt").write_text("mine\n")
    monkeypatch.setattr(series, "steps", _never)
    code, out, err = _run("pr", "--series", "notes.txt", "--author", "A <a@example.com>", ".")
    assert (code, out) == (2, "")
    assert err == "error: notes.txt: not a folder (--series DIR takes a folder); nothing written\n"
    assert (work / "notes.txt").read_text() == "mine\n"


def test_build_wheel_into_a_file_is_refused_before_the_wheel_is_patched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").write_text("mine\n")
    monkeypatch.setattr(wheel, "patched_files", _never)
    monkeypatch.setattr(wheel, "cached_release_wheel", _never)
    code, out, err = _run("build-wheel", "--release", "0.5.23", "--output", "out")
    assert (code, out) == (2, "")
    assert err == "error: out: not a folder (--output DIR takes a folder); nothing written\n"


def test_build_wheel_without_a_release_asks_for_one_and_downloads_nothing(tmp_path, monkeypatch):
    # a fork on one release is never handed the other's wheel by default
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(wheel, "patched_files", _never)
    monkeypatch.setattr(wheel, "cached_release_wheel", _never)
    code, out, err = _run("build-wheel")
    assert (code, out) == (2, "")
    assert err == (
        "error: which release? pass --release with one of 0.5.9, 0.5.10, 0.5.10.post1, "
        "0.5.11, 0.5.22, 0.5.23 (the release your fork is on), or --wheel PATH; nothing "
        "written\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_build_wheel_from_a_wheel_of_another_release_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(wheel, "patched_files", _never)
    for name in ("sglang-0.5.17-py3-none-any.whl", "sglang-0.5.23-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    code, out, err = _run("build-wheel", "--wheel", "sglang-0.5.17-py3-none-any.whl")
    assert (code, out) == (2, "")
    assert err == (
        "error: sglang-0.5.17-py3-none-any.whl: sglang 0.5.17; expected sglang 0.5.9, "
        "0.5.10, 0.5.10.post1, 0.5.11, 0.5.22 or 0.5.23; nothing written\n"
    )
    code, out, err = _run(
        "build-wheel", "--release", "0.5.11", "--wheel", "sglang-0.5.23-py3-none-any.whl"
    )
    assert (code, out) == (2, "")
    assert err == (
        "error: sglang-0.5.23-py3-none-any.whl: sglang 0.5.23, not the --release 0.5.11; "
        "nothing written\n"
    )
    assert not (tmp_path / "dist").exists()


def test_build_wheel_from_a_missing_wheel_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run("build-wheel", "--wheel", "nope.whl")
    assert (code, out) == (2, "")
    assert err == "error: nope.whl: no such file; nothing written\n"


# -- a syntax error -------------------------------------------------------------------
def test_a_syntax_error_is_named_at_pythons_line(work):
    worker = work / "python/sglang/srt/speculative/eagle_worker.py"
    lines = worker.read_text().splitlines(keepends=True)
    number = next(i for i, line in enumerate(lines, 1) if "self.topk = " in line)
    lines[number - 1] = lines[number - 1].rstrip("\n") + " +\n"
    worker.write_text("".join(lines))
    try:
        compile(worker.read_text(), str(worker), "exec")
    except SyntaxError as exc:
        assert exc.lineno == number
    for command in ("check", "apply"):
        code, out, err = _run(command, ".")
        assert (code, out) == (2, ""), command
        assert err.startswith(
            f"error: python/sglang/srt/speculative/eagle_worker.py:{number}: cannot parse: "
        ), err


# -- one cache variable ---------------------------------------------------------------
def _help(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli.main([*argv, "--help"])
    return " ".join(out.getvalue().split())


def test_every_help_text_names_the_one_cache_variable():
    texts = {command: _help(command) for command in ("check", "build-wheel")}
    for command, text in texts.items():
        assert "$SGLANG_EAGLE_SIZING_CACHE/" in text, (command, text)
        assert "SGLANG_EAGLE_SIZING_CACHE_DIR" not in text
    sources = Path(cli.__file__).parent.rglob("*.py")
    assert not [p for p in sources if "SGLANG_EAGLE_SIZING_CACHE_DIR" in p.read_text()]


def test_the_cache_variable_moves_checks_and_wheels(tmp_path, monkeypatch):
    from sglang_eagle_sizing.engine import default_cache_dir

    monkeypatch.setenv("SGLANG_EAGLE_SIZING_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path / "check"
    assert wheel.cache_folder() == tmp_path / "wheels"


# -- the summary line -----------------------------------------------------------------
def test_check_apply_and_revert_print_their_summary_on_stderr(work):
    code, out, err = _run("check", ".")
    assert code == 1 and err.splitlines()[-2].startswith("checked SGLang 0.5.11")
    code, out, err = _run("apply", ".")
    assert code == 0
    assert err.splitlines() == [err.splitlines()[-1]]
    assert err.startswith("applied to SGLang 0.5.11 (git tag v0.5.11) at python/sglang: ")
    assert out and all(line.split()[0] in ("routed", "support", "added") for line in out.splitlines())
    code, out, err = _run("apply", ".")
    assert (code, out) == (0, "") and err.startswith("nothing to do: ")
    code, out, err = _run("check", ".")
    assert (code, out) == (0, "") and err.startswith("checked SGLang 0.5.11")
    code, out, err = _run("revert", ".")
    assert (code, out) == (0, "") and err.startswith("reverted SGLang 0.5.11")
    assert _run("apply", "-q", ".") == (0, "", "")


# -- after the patch is committed -----------------------------------------------------
def test_nothing_to_do_after_a_commit_keeps_what_revert_needs(work):
    assert _run("apply", "-q", ".")[0] == 0
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "patch")
    code, out, err = _run("apply", ".")
    assert (code, out) == (0, "") and err.startswith("nothing to do: "), err
    code, out, err = _run("revert", ".")
    assert code == 0, err
    # the files come back as they were before the apply: the change to commit takes it out
    git(work, "commit", "-q", "-am", "take the patch out")
    assert git(work, "diff", "HEAD~2", "--stat") == ""


def test_revert_without_a_backup_on_a_patched_checkout_points_to_git_revert(work):
    assert _run("apply", "-q", ".")[0] == 0
    shutil.rmtree(state_dir(work))  # e.g. a fresh clone of the fork
    code, out, err = _run("revert", ".")
    assert (code, out) == (2, "")
    assert err.startswith("error: python/sglang: no backup of an apply here; nothing to revert")
    assert "git revert the commit that applied it" in err and len(err.splitlines()) == 1


# -- relative paths -------------------------------------------------------------------
def test_an_interrupted_run_is_named_from_the_working_folder(work):
    result, _, _ = run_forked(
        ["apply", "-q", "."], lambda mp: mp.setattr(transaction, "_complete", _kill)
    )
    assert result == "SIGKILL"
    code, out, err = _run("check", ".")
    assert ".git/sglang-eagle-sizing/backup/journal.json: an interrupted apply" in err
    assert str(work) not in err
    assert _run("apply", "-q", ".")[0] == 0


def _kill(*args):
    os.kill(os.getpid(), signal.SIGKILL)


# -- the hint names the tool as it was run --------------------------------------------
def test_the_fix_hint_names_the_tool_as_it_was_run(tmp_path, monkeypatch):
    script = tmp_path / ".venv" / "bin" / "sglang-eagle-sizing"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert cli.program(".venv/bin/sglang-eagle-sizing") == [".venv/bin/sglang-eagle-sizing"]
    assert cli.program(str(script)) == [".venv/bin/sglang-eagle-sizing"]
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert cli.program(str(script)) == ["sglang-eagle-sizing"]
    assert cli.program(None) == ["sglang-eagle-sizing"]
    main_py = Path(cli.__file__).with_name("__main__.py")
    assert cli.program(str(main_py))[1:] == ["-m", "sglang_eagle_sizing"]


# -- another version ------------------------------------------------------------------
def test_the_untested_version_warning_comes_before_the_refusal_of_upstreams_refactor(work):
    """A checkout of a later release that carries upstream's own ``hidden_size_for`` (0.5.12+;
    here 0.5.12, made from 0.5.11 by adding the classmethod): with the flag, the promised
    ``warning:`` line, then the refusal, both with relative paths."""
    info = work / "python/sglang/srt/speculative/eagle_info.py"
    text = info.read_text()
    anchor = "class EagleDraftInput("
    start = text.index(anchor)
    body = text.index("\n", text.index(":", start + len(anchor))) + 1
    text = (
        text[:body]
        + "    @classmethod\n    def hidden_size_for(cls, worker):\n        return 0\n\n"
        + text[body:]
    )
    info.write_text(text)
    git(work, "commit", "-q", "-am", "upstream 0.5.12")
    git(work, "tag", "v0.5.12")
    code, out, err = _run("apply", "--allow-untested-version", ".")
    assert (code, out) == (2, "")
    warning, refusal = err.splitlines()
    assert warning == (
        "warning: SGLang 0.5.12 (git tag v0.5.12): only 0.5.9, 0.5.10, 0.5.10.post1, "
        "0.5.11, 0.5.22 and 0.5.23 are tested; proceeding on structure (--allow-untested-version)"
    )
    assert refusal.startswith(
        "error: python/sglang: SGLang 0.5.12 (git tag v0.5.12) already carries upstream's "
        "own version of this refactor (EagleDraftInput.hidden_size_for at "
        "python/sglang/srt/speculative/eagle_info.py:"
    ), refusal
    assert str(work) not in err
    # without the flag: the refusal alone
    code, out, err = _run("check", ".")
    assert code == 2 and len(err.splitlines()) == 1 and "upstream's own" in err
