"""``sglang-eagle-sizing apply|check|diff|revert [PATH]``.

Exit codes, like black's and ruff's: 0 all good; 1 ``check`` found work to do; 2 an error
(the folder is not an SGLang tree, a site the rules cannot handle, a file that cannot be
read or written, ...): one ``error:`` line, nothing written; 130 / 143 interrupted by SIGINT
(Ctrl-C) / SIGTERM: one ``interrupted:`` line, a run that was writing rolled back.

Streams, as black's: stdout carries what a script reads (check's and apply's one line per
piece of work, the diff, the pull request); stderr carries the summary line and every
``note:``, ``warning:``, ``error:`` and ``interrupted:`` line. On success: the lines of the
work (``check``'s left to do, ``apply``'s done) and one summary line (``apply -q``: nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

# Start-up loads only what parsing the command line and locating the tree need: the engine,
# the rules, libcst and black load when a command runs them (``check_tree``, ``rewrite_tree``).
from sglang_eagle_sizing import __version__, command_of, interrupted_line, transaction
from sglang_eagle_sizing.caches import CACHE_ENV
from sglang_eagle_sizing.families import FAMILIES
from sglang_eagle_sizing.tree import (
    ALLOW_FLAG,
    TESTED_TEXT,
    SglangTree,
    TreeError,
    display,
)

if TYPE_CHECKING:
    from sglang_eagle_sizing.engine import Finding
    from sglang_eagle_sizing.patch import TreeReport

OK, WORK_TO_DO, ERROR = 0, 1, 2
#: the name the tool is installed under (its console script)
NAME = "sglang-eagle-sizing"

#: where a refused tree's maintainer finds what to do: help installed with the tool
REFUSAL_HELP = "sglang-eagle-sizing apply --help says what to do"
#: the help's account of refusals (the epilog of apply)
REFUSALS = (
    "Refusals. apply writes nothing (exit 2) when the tree holds a place the rules do not "
    "know (e.g. a hidden-state width or idle input in a place or shape the release does not "
    "have, listed 'unknown' or 'not found' with file:line), or a place a rule owns but cannot "
    "rewrite without moving or dropping a statement of the fork's own (named with file:line "
    "and why). Bring that place back to the shape of the tree's release ("
    + " or ".join(family.name for family in FAMILIES)
    + "; git diff against its tag shows it), or make the change there by hand as the patch "
    "makes it elsewhere, then run apply again; check lists what is left. A statement of the "
    "fork's near a site is kept where it is, in its order, or refused: never moved silently."
)

#: the end of each command's help: apply's refusals where they are apply's, a pointer to them
#: where the command only reports what apply would do
EPILOGS = {
    "check": "Exit 0: nothing to do; 1: the work listed on stdout, which apply does; 2: an "
    "error. A place the rules do not know is listed too; what apply refuses and what to do "
    "then: sglang-eagle-sizing apply --help.",
    "diff": "What apply refuses and what to do then: sglang-eagle-sizing apply --help.",
    "apply": REFUSALS,
}

#: Commands that live in their own module. Each module defines ``HELP`` (one line),
#: ``add_arguments(parser)`` and ``run(args) -> int`` (an exit code as above).
MODULE_COMMANDS = {
    "report": "sglang_eagle_sizing.report.command",
    "build-wheel": "sglang_eagle_sizing.wheel",
    "pr": "sglang_eagle_sizing.pr",
    "smoke": "sglang_eagle_sizing.smoke",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglang-eagle-sizing",
        description=(
            "Patch an SGLang tree so that EAGLE's hidden-state sizes come from one source "
            "of truth. "
            + " ".join(f"{family.name}: {family.summary}." for family in FAMILIES)
            + " The tree's version picks its family."
        ),
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {
        "check": "exit 1 and list the work apply would do; change nothing",
        "diff": "print the unified diff apply would write",
        "apply": "write the patch (a second apply changes nothing)",
        "revert": "restore the bytes apply saved",
    }
    for name, text in helps.items():
        command = commands.add_parser(
            name,
            help=text,
            description=text,
            epilog=EPILOGS.get(name),
        )
        command.add_argument(
            "path",
            nargs="?",
            metavar="PATH",
            help="an sglang package folder (holding srt/) or a checkout root holding "
            "python/sglang and test/; default: the installed sglang",
        )
        add_allow_flag(command)
        if name == "check":
            command.add_argument(
                "--no-cache",
                action="store_true",
                help="check every file again instead of reusing the results kept for "
                f"unchanged files (kept in ${CACHE_ENV}/check, by default "
                "~/.cache/sglang-eagle-sizing/check)",
            )
        if name == "apply":
            command.add_argument(
                "-q", "--quiet", action="store_true", help="print nothing on success"
            )
            command.add_argument(
                "--force",
                action="store_true",
                help="re-patch files edited by hand since the last apply (refused without "
                "it); each edited file is first saved to the backup folder's edited/ (under "
                "the git directory of a checkout, else <sglang>/.eagle-sizing-backup/). Never "
                "forces past a site the rules cannot rewrite or an unknown site",
            )
        if name == "revert":
            command.add_argument(
                "--force",
                action="store_true",
                help="restore the saved originals even over files edited by hand since apply "
                "(refused without it); each edited file is first saved (under the git "
                "directory of a checkout, else <sglang>/.eagle-sizing-edited/) and kept there",
            )
    for name, module_name in MODULE_COMMANDS.items():
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        command = commands.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def add_allow_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        ALLOW_FLAG,
        dest="allow_untested_version",
        action="store_true",
        help=f"work on a tree whose SGLang version is not a tested one, on structure "
        f"alone (only {TESTED_TEXT} are tested); a tree carrying upstream's own version of "
        "the refactor is refused anyway",
    )


def locate(
    args: argparse.Namespace, path: str | None, allow_upstream_refactor: bool = False
) -> SglangTree:
    """The tree a command works on; prints the one-line note on its version, if any."""
    tree = SglangTree.locate(
        path,
        allow_untested_version=args.allow_untested_version,
        allow_upstream_refactor=allow_upstream_refactor,
        notify=lambda note: print(note, file=sys.stderr),
    )
    here = Path.cwd() / "python" / "sglang"
    if path is None and (here / "srt").is_dir() and here.resolve() != tree.package:
        print(
            f"note: no PATH: working on the installed sglang ({display(tree.package)}), "
            f"not on {display(here)}; pass . for this checkout",
            file=sys.stderr,
        )
    return tree


def program(argv0: str | None = None) -> list[str]:
    """The words that run this tool as the user ran it, for a hint to copy: the console
    script's name when that name finds this very script on PATH, else its path as typed
    (``.venv/bin/sglang-eagle-sizing``); ``python -m sglang_eagle_sizing`` likewise with the
    interpreter. ``argv0``: ``sys.argv[0]`` (``None``: called in-process, the script's name)."""
    if argv0 is None:
        return [NAME]
    if Path(argv0).name == "__main__.py":
        return [_as_typed(sys.executable), "-m", "sglang_eagle_sizing"]
    return [_as_typed(argv0)]


def _as_typed(path: str) -> str:
    """``path``'s basename if PATH finds that same file under it, else the path (relative to
    the working folder when it is under it)."""
    found = shutil.which(os.path.basename(path))
    try:
        if found and os.path.samefile(found, path):
            return os.path.basename(path)
    except OSError:
        pass
    return display(Path(path))


#: how this run was invoked (``main`` sets it from ``sys.argv`` when run as a command)
_PROGRAM: list[str] = [NAME]
#: whether this run's transaction finished (an interrupt after it is not "nothing written")
_WROTE = False


def fix_command(args: argparse.Namespace) -> str:
    """The ``apply`` that fixes what ``check`` found, with the program and the PATH as the
    user gave them."""
    words = [*_PROGRAM, "apply"]
    if args.allow_untested_version:
        words.append(ALLOW_FLAG)
    if args.path is not None:
        words.append(args.path)
    return " ".join(shlex.quote(word) for word in words)


def _where(tree: SglangTree, finding: Finding) -> str:
    """``path:line`` the user can open from where they ran the command."""
    return f"{display(tree.srt / finding.file)}:{finding.line}"


def _print_problems(report: TreeReport, out) -> None:
    tree = report.tree
    for finding in report.unknown:
        print(
            f"{_where(tree, finding)}  {finding.scope}  {finding.label}  unknown "
            f"{finding.label}",
            file=out,
        )
    for site in report.missing:
        print(
            f"{display(tree.srt / site.file)}  {site.scope}  {site.phase.value}  not found",
            file=out,
        )


def check_tree(tree: SglangTree, cache) -> TreeReport:
    """``patch.check_tree``, loaded when a command runs it."""
    from sglang_eagle_sizing.patch import check_tree

    return check_tree(tree, cache)


def rewrite_tree(tree: SglangTree) -> TreeReport:
    """``patch.rewrite_tree``, loaded when a command runs it."""
    from sglang_eagle_sizing.patch import rewrite_tree

    return rewrite_tree(tree)


def _refusals() -> tuple[type[Exception], ...]:
    """The errors a command refuses with (one ``error:`` line): ``TreeError``, and
    ``RewriteError`` once the engine that raises it is loaded."""
    engine = sys.modules.get(f"{__package__}.engine")
    return (TreeError,) if engine is None else (TreeError, engine.RewriteError)


def _count(number: int, one: str, many: str | None = None) -> str:
    return f"{number} {one if number == 1 else (many or one + 's')}"


def main(argv: list[str] | None = None) -> int:
    """The command line; ``argv`` given: called in-process (hints name the tool by its
    console script's name)."""
    global _PROGRAM, _WROTE
    _PROGRAM = program(None if argv is not None else sys.argv[0])
    _WROTE = False
    command = command_of(sys.argv[1:] if argv is None else argv)
    with transaction.handle_signals():  # parsing too (a Ctrl-C there: the same one line)
        try:
            return _main(_parser().parse_args(argv))
        except (KeyboardInterrupt, RuntimeError) as caught:
            # Python 3.11 hands on an interrupt raised while a class is made (a dataclass
            # field's __set_name__, as a module loads) as a RuntimeError caused by it
            exc = caught if isinstance(caught, KeyboardInterrupt) else caught.__cause__
            if not isinstance(exc, KeyboardInterrupt):
                raise
            _flush()
            if sys.stderr.isatty():  # a progress line may be on the screen
                sys.stderr.write("\r\x1b[K")
            what = exc.what if isinstance(exc, transaction.Interrupted) else ""
            print(interrupted_line(command, _WROTE, what), file=sys.stderr)
            return (
                exc.exit_code if isinstance(exc, transaction.Interrupted) else 130
            )
        except BrokenPipeError:  # stdout closed by the reader (| head): stop quietly
            with contextlib.suppress(OSError, ValueError):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            return 141  # 128 + SIGPIPE, as a shell reports it
        except OSError as exc:  # one that no command turned into a message of its own
            _flush()
            where = f"{display(Path(exc.filename))}: " if exc.filename else ""
            print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
            return ERROR


def _flush() -> None:
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def _main(args: argparse.Namespace) -> int:
    if hasattr(args, "run"):
        try:
            return args.run(args)
        except _refusals() as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ERROR
    tree = None
    try:
        tree = locate(args, args.path)
        if args.command == "check":
            return _check(tree, args)
        if args.command == "diff":
            return _diff(tree)
        with transaction.locked(tree):
            found = transaction.describe(tree)
            interrupted = transaction.recover(tree)
            if interrupted is not None:
                print(f"{found}: finished it", file=sys.stderr)
                if interrupted.operation == args.command:
                    return OK
            committed = transaction.committed_files(tree, transaction.read_manifest(tree))
            if args.command == "revert":
                return _revert(tree, force=args.force, committed=committed)
            report = _rewrite(tree)
            if report is None:
                return ERROR
            # an apply with nothing to do keeps the backup: revert still undoes the last apply
            if committed is not None and (report.changed or report.tests_to_add):
                # git holds what the backup was for: the next revert is git's (README)
                transaction.drop_backup(tree)
                print(
                    f"note: {tree.describe()}: the last apply is committed; its backup "
                    "under the git directory is dropped and this apply starts a new one",
                    file=sys.stderr,
                )
            return _apply(tree, report, force=args.force, quiet=args.quiet)
    except _refusals() as exc:
        _flush()
        print(f"error: {_message(tree, exc)}", file=sys.stderr)
        return ERROR


def _message(tree: SglangTree | None, exc: Exception) -> str:
    """An error as the user reads it: a file a rule could not rewrite is named from where
    they run the command, like every other path this tool prints."""
    if not isinstance(exc, TreeError) and tree is not None:  # a RewriteError
        where = f"{display(tree.srt / exc.file)}:{exc.line}"
        if exc.reason.startswith("cannot parse"):
            return f"{where}: {exc.reason}; nothing written"
        return f"{where}: {exc.reason} (nothing written; {REFUSAL_HELP})"
    return str(exc)


def _check(tree: SglangTree, args: argparse.Namespace) -> int:
    """stdout: one line per piece of work; stderr: which tree, what it found, and the
    command that fixes it."""
    from sglang_eagle_sizing.engine import FindingsCache, default_cache_dir

    interrupted = transaction.describe(tree)
    cache = FindingsCache(default_cache_dir()) if not args.no_cache else None
    report = check_tree(tree, cache)
    for finding in report.unrouted:
        print(f"{_where(tree, finding)}  {finding.scope}  {finding.label}")
    _print_problems(report, sys.stdout)
    for key in report.modules_to_add:
        print(f"{display(tree.path(key))}  module  not added")
    for key in report.tests_to_add:
        print(f"{display(tree.path(key))}  fork-test  not added")
    sys.stdout.flush()  # the summary (stderr) comes last, also where both go to one stream
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    if interrupted is not None:
        print(
            f"{interrupted}: apply finishes it (or revert rolls it back)",
            file=sys.stderr,
        )
    if report.routed and interrupted is None:
        # 0.5.23 has no sizing site of this patch's (upstream routes them): only changes
        found = "every sizing site routed" if tree.family.sites else "every change made"
        if report.tests_present:
            found += f", {_count(len(report.tests_present), 'fork test file')} present"
        print(f"checked {tree.describe()}: {found}", file=sys.stderr)
        return OK
    work = []
    if report.sites_to_route:
        work.append(f"{_count(len(report.sites_to_route), 'sizing site')} to route")
    if report.supporting_changes:
        work.append(
            f"{_count(len(report.supporting_changes), 'supporting change')} to make"
        )
    if report.modules_to_add:
        work.append(f"{_count(len(report.modules_to_add), 'module')} to add")
    if report.tests_to_add:
        work.append(f"{_count(len(report.tests_to_add), 'fork test file')} to add")
    if report.unknown or report.missing:
        work.append(
            f"{_count(len(report.unknown) + len(report.missing), 'sizing site')} the rules "
            "do not know"
        )
    if interrupted is not None:
        work.append("an interrupted run to finish")
    print(f"checked {tree.describe()}: {', '.join(work)}", file=sys.stderr)
    if report.unknown or report.missing:
        print(
            "apply refuses a tree with sizing sites the rules do not know (marked unknown "
            f"or not found above); {REFUSAL_HELP}",
            file=sys.stderr,
        )
    else:
        print(f"to fix, run: {fix_command(args)}", file=sys.stderr)
    return WORK_TO_DO


def _rewrite(tree: SglangTree) -> TreeReport | None:
    """What apply would write, or None (after saying why on stderr) if it must not."""
    report = rewrite_tree(tree)
    if report.unknown or report.missing:
        print(
            "error: sizing sites the rules cannot handle; nothing written "
            f"({REFUSAL_HELP}):",
            file=sys.stderr,
        )
        _print_problems(report, sys.stderr)
        return None
    return report


def _diff(tree: SglangTree) -> int:
    interrupted = transaction.describe(tree)
    if interrupted is not None:
        raise TreeError(
            f"{interrupted}: run apply to finish it (or revert) before diff"
        )
    report = _rewrite(tree)
    if report is None:
        return ERROR
    sys.stdout.write(report.diff())
    sys.stdout.flush()  # the notes (stderr) after the diff, also where both go to one stream
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    return OK


def _apply(tree: SglangTree, report: TreeReport, force: bool, quiet: bool) -> int:
    global _WROTE
    edited = transaction.apply(tree, report.changes(), force=force)
    _WROTE = bool(report.changes())
    for key in edited:
        print(
            f"{display(tree.path(key))}: edited since apply; saved to "
            f"{display(tree.backup_dir / transaction.EDITED / key)} and patched again",
            file=sys.stderr,
        )
    if quiet:
        return OK
    for finding in report.sites_to_route:
        print(f"routed   {_where(tree, finding)}  {finding.scope}  {finding.label}")
    for finding in report.supporting_changes:
        print(f"support  {_where(tree, finding)}  {finding.scope}  {finding.label}")
    for key in [*report.modules_to_add, *report.tests_to_add]:
        print(f"added    {display(tree.path(key))}")
    if not report.changed and not report.tests_to_add and not report.modules_to_add:
        sys.stdout.flush()
        print(
            f"nothing to do: {tree.describe()} has "
            + ("every sizing site routed" if tree.family.sites else "every change made")
            + (" and its fork tests" if report.tests_present else ""),
            file=sys.stderr,
        )
        return OK
    done = [
        f"{_count(len(report.sites_to_route), 'sizing site')} routed",
        _count(len(report.supporting_changes), "supporting change"),
    ]
    if not tree.family.sites:  # upstream routes every site (0.5.23): say only what changed
        done = done[1:]
    if report.modules_to_add:
        done.append(f"{_count(len(report.modules_to_add), 'module')} added")
    if report.tests_to_add:
        done.append(f"{_count(len(report.tests_to_add), 'fork test file')} added")
    sys.stdout.flush()  # the summary (stderr) comes last, also where both go to one stream
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    print(
        f"applied to {tree.describe()}: {', '.join(done)} "
        f"({_count(len(report.changed), 'file')} changed)",
        file=sys.stderr,
    )
    return OK


def _revert(tree: SglangTree, force: bool, committed: list[str] | None = None) -> int:
    if committed is not None and not force:
        manifest = transaction.read_manifest(tree)
        changed = [
            key
            for key in committed
            if transaction.digest(transaction._read(tree.path(key)))
            != manifest[key]["patched_sha256"]
        ]
        if changed:
            raise TreeError(
                f"{display(tree.path(changed[0]))}: the apply is committed and this file "
                "changed since; restoring the bytes from before apply would undo the fork's "
                "later work: nothing reverted (take the patch out with git, e.g. git revert "
                "the commit that applied it; revert --force restores those bytes anyway)"
            )
    global _WROTE
    if not transaction.read_manifest(tree):
        _nothing_to_revert(tree)
    reverted = transaction.revert(tree, force=force)
    _WROTE = True
    for key in reverted.edited:
        print(
            f"{display(tree.path(key))}: edited since apply; the edited file is kept in "
            f"{display(tree.kept_edited_dir / key)}",
            file=sys.stderr,
        )
    restored = len(reverted.restored) - len(reverted.removed)
    done = [f"{_count(restored, 'file')} restored"]
    srt = tree.key("") + "/"
    modules = [key for key in reverted.removed if key.startswith(srt)]
    if modules:
        done.append(f"{_count(len(modules), 'module')} removed")
    if len(reverted.removed) > len(modules):
        tests = len(reverted.removed) - len(modules)
        done.append(f"{_count(tests, 'fork test file')} removed")
    print(f"reverted {tree.describe()}: {', '.join(done)}", file=sys.stderr)
    return OK


def _nothing_to_revert(tree: SglangTree) -> None:
    """No backup: say so, and on a patched tree where the patch went (into a commit, most
    likely) and how to take it out."""
    where = f"{display(tree.package)}: no backup of an apply here; nothing to revert"
    if not tree.family.carries_patch(tree.srt):
        raise TreeError(f"{where} (the tree is not patched)")
    if tree.git_dir is not None:
        raise TreeError(
            f"{where}: the patch is in the tree but its backup is gone (dropped when an "
            "apply found the patch committed, or never made here); take it out with git, "
            "e.g. git revert the commit that applied it"
        )
    raise TreeError(
        f"{where}: the patch is in the tree but its backup is gone; reinstall SGLang to "
        "get the release's files back"
    )
