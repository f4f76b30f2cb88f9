"""``sglang-eagle-sizing apply|check|diff|revert [PATH]``.

Exit codes, like black's and ruff's: 0 all good; 1 ``check`` found work to do; 2 an error
(the folder is not an SGLang tree, a site the rules cannot handle, ...): nothing written.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import shlex
import sys
from pathlib import Path

from . import __version__, transaction
from .engine import Finding, FindingsCache, RewriteError, default_cache_dir
from .patch import TreeReport, check_tree, rewrite_tree
from .tree import ALLOW_FLAG, TESTED_TEXT, SglangTree, TreeError, display

OK, WORK_TO_DO, ERROR = 0, 1, 2

#: where a refused tree's maintainer finds what to do: help installed with the tool
REFUSAL_HELP = "sglang-eagle-sizing apply --help says what to do"
#: the help's account of refusals (the epilog of check, diff and apply)
REFUSALS = (
    "Refusals. apply writes nothing (exit 2) when the tree holds a sizing site the rules do "
    "not know (a hidden-state width or idle input in a place or shape 0.5.11 does not have: "
    "listed 'unknown' or 'not found' with file:line), or a place a rule owns but cannot "
    "rewrite without moving or dropping a statement of the fork's own (named with file:line "
    "and why). Bring that place back to the shape of the 0.5.11 release (git diff against "
    "the release tag shows it), or route it by hand through hidden_size_for/dtype_for as "
    "the other sites are, then run apply again; check lists what is left. A statement of "
    "the fork's near a site is kept where it is, in its order, or refused: never moved "
    "silently."
)

#: Commands that live in their own module. Each module defines ``HELP`` (one line),
#: ``add_arguments(parser)`` and ``run(args) -> int`` (an exit code as above).
MODULE_COMMANDS = {
    "report": "sglang_eagle_sizing.report",
    "build-wheel": "sglang_eagle_sizing.wheel",
    "pr": "sglang_eagle_sizing.pr",
    "smoke": "sglang_eagle_sizing.smoke",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglang-eagle-sizing",
        description=(
            "Route every EAGLE hidden-state sizing site of SGLang 0.5.11 through "
            "EagleDraftInput/EagleDraftExtendInput.hidden_size_for and dtype_for."
        ),
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    helps = {
        "check": "exit 1 and list every site not yet routed; change nothing",
        "diff": "print the unified diff apply would write",
        "apply": "write the patch (a second apply changes nothing)",
        "revert": "restore the bytes apply saved",
    }
    for name, text in helps.items():
        command = commands.add_parser(
            name,
            help=text,
            description=text,
            epilog=REFUSALS if name != "revert" else None,
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
                "unchanged files (the cache lives in $SGLANG_EAGLE_SIZING_CACHE_DIR, else "
                "$XDG_CACHE_HOME/sglang-eagle-sizing or ~/.cache/sglang-eagle-sizing)",
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
    )
    note = tree.version_note()
    if note:
        print(note, file=sys.stderr)
    here = Path.cwd() / "python" / "sglang"
    if path is None and (here / "srt").is_dir() and here.resolve() != tree.package:
        print(
            f"note: no PATH: working on the installed sglang ({display(tree.package)}), "
            f"not on {display(here)}; pass . for this checkout",
            file=sys.stderr,
        )
    return tree


def fix_command(args: argparse.Namespace) -> str:
    """The ``apply`` that fixes what ``check`` found, with the PATH as the user gave it."""
    words = ["sglang-eagle-sizing", "apply"]
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


def _count(number: int, one: str, many: str | None = None) -> str:
    return f"{number} {one if number == 1 else (many or one + 's')}"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if hasattr(args, "run"):
        try:
            return args.run(args)
        except (TreeError, RewriteError) as exc:
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
            if committed is not None:
                # git holds what the backup was for: the next revert is git's (README)
                transaction.drop_backup(tree)
                print(
                    f"note: {tree.describe()}: the last apply is committed; its backup "
                    "under the git directory is dropped and this apply starts a new one",
                    file=sys.stderr,
                )
            return _apply(tree, force=args.force, quiet=args.quiet)
    except (TreeError, RewriteError) as exc:
        sys.stdout.flush()
        print(f"error: {_message(tree, exc)}", file=sys.stderr)
        return ERROR


def _message(tree: SglangTree | None, exc: Exception) -> str:
    """An error as the user reads it: a file a rule could not rewrite is named from where
    they run the command, like every other path this tool prints."""
    if isinstance(exc, RewriteError) and tree is not None:
        where = f"{display(tree.srt / exc.file)}:{exc.line}"
        return f"{where}: {exc.reason} (nothing written; {REFUSAL_HELP})"
    return str(exc)


def _check(tree: SglangTree, args: argparse.Namespace) -> int:
    """stdout: one line per piece of work; stderr: which tree, what it found, and the
    command that fixes it."""
    interrupted = transaction.describe(tree)
    cache = FindingsCache(default_cache_dir()) if not args.no_cache else None
    report = check_tree(tree, cache)
    for finding in report.unrouted:
        print(f"{_where(tree, finding)}  {finding.scope}  {finding.label}")
    _print_problems(report, sys.stdout)
    for key in report.tests_to_add:
        print(f"{display(tree.path(key))}  fork-test  not added")
    sys.stdout.flush()  # the summary (stderr) comes last, also where both go to one stream
    if interrupted is not None:
        print(
            f"{interrupted}: apply finishes it (or revert rolls it back)",
            file=sys.stderr,
        )
    if report.routed and interrupted is None:
        found = "every sizing site routed"
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
    return OK


def _apply(tree: SglangTree, force: bool, quiet: bool) -> int:
    report = _rewrite(tree)
    if report is None:
        return ERROR
    for key in transaction.apply(tree, report.changes(), force=force):
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
    for key in report.tests_to_add:
        print(f"added    {display(tree.path(key))}")
    if not report.changed and not report.tests_to_add:
        print(
            f"nothing to do: {tree.describe()} has every sizing site routed"
            + (" and its fork tests" if report.tests_present else "")
        )
        return OK
    done = [
        f"{_count(len(report.sites_to_route), 'sizing site')} routed",
        _count(len(report.supporting_changes), "supporting change"),
    ]
    if report.tests_to_add:
        done.append(f"{_count(len(report.tests_to_add), 'fork test file')} added")
    print(
        f"applied to {tree.describe()}: {', '.join(done)} "
        f"({_count(len(report.changed), 'file')} changed)"
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
    reverted = transaction.revert(tree, force=force)
    for key in reverted.edited:
        print(
            f"{display(tree.path(key))}: edited since apply; the edited file is kept in "
            f"{display(tree.kept_edited_dir / key)}",
            file=sys.stderr,
        )
    restored = len(reverted.restored) - len(reverted.removed)
    done = [f"{_count(restored, 'file')} restored"]
    if reverted.removed:
        done.append(f"{_count(len(reverted.removed), 'fork test file')} removed")
    print(f"reverted {tree.describe()}: {', '.join(done)}")
    return OK
