"""``sglang-eagle-sizing apply|check|diff|revert [PATH]``.

Exit codes, like black's and ruff's: 0 all good; 1 ``check`` found work to do; 2 an error
(the folder is not an SGLang tree, a site the rules cannot handle, ...): nothing written.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from . import __version__, transaction
from .engine import FindingsCache, RewriteError, default_cache_dir
from .patch import TreeReport, check_tree, rewrite_tree
from .tree import SglangTree, TreeError

OK, WORK_TO_DO, ERROR = 0, 1, 2

#: Commands that live in their own module. Each module defines ``HELP`` (one line),
#: ``add_arguments(parser)`` and ``run(args) -> int`` (an exit code as above).
MODULE_COMMANDS = {
    "report": "sglang_eagle_sizing.report",
    "build-wheel": "sglang_eagle_sizing.wheel",
    "pr": "sglang_eagle_sizing.pr",
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
        command = commands.add_parser(name, help=text, description=text)
        command.add_argument(
            "path",
            nargs="?",
            metavar="PATH",
            help="an sglang package folder (holding srt/) or a checkout root holding "
            "python/sglang; default: the installed sglang",
        )
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
                "it); each edited file is first saved to .eagle-sizing-backup/edited/. Never "
                "forces past a site the rules cannot rewrite, an unknown site or another "
                "SGLang version",
            )
        if name == "revert":
            command.add_argument(
                "--force",
                action="store_true",
                help="restore the saved originals even over files edited by hand since apply "
                "(refused without it); each edited file is first saved to "
                ".eagle-sizing-edited/ next to srt/, which revert leaves in place",
            )
    for name, module_name in MODULE_COMMANDS.items():
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        command = commands.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def _print_problems(report: TreeReport, out) -> None:
    for finding in report.unknown:
        print(f"{finding.format()}  unknown {finding.label}", file=out)
    for site in report.missing:
        print(f"{site.file}  {site.scope}  {site.phase.value}  not found", file=out)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if hasattr(args, "run"):
        try:
            return args.run(args)
        except (TreeError, RewriteError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return ERROR
    try:
        tree = SglangTree.locate(args.path)
        if args.command == "check":
            return _check(tree, use_cache=not args.no_cache)
        if args.command == "diff":
            return _diff(tree)
        with transaction.locked(tree):
            found = transaction.describe(tree)
            interrupted = transaction.recover(tree)
            if interrupted is not None:
                print(f"{found}: finished it", file=sys.stderr)
                if interrupted.operation == args.command:
                    return OK
            if args.command == "revert":
                return _revert(tree, force=args.force)
            return _apply(tree, force=args.force, quiet=args.quiet)
    except (TreeError, RewriteError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ERROR


def _check(tree: SglangTree, use_cache: bool) -> int:
    interrupted = transaction.describe(tree)
    if interrupted is not None:
        print(
            f"{interrupted}: apply finishes it (or revert rolls it back)",
            file=sys.stderr,
        )
    cache = FindingsCache(default_cache_dir()) if use_cache else None
    report = check_tree(tree, cache)
    for finding in report.unrouted:
        print(finding.format())
    _print_problems(report, sys.stdout)
    return OK if report.routed and interrupted is None else WORK_TO_DO


def _rewrite(tree: SglangTree) -> TreeReport | None:
    """What apply would write, or None (after saying why on stderr) if it must not."""
    report = rewrite_tree(tree)
    if report.unknown or report.missing:
        print(
            "error: sizing sites the rules cannot handle; nothing written:",
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
    for result in report.changed:
        sys.stdout.write(result.unified_diff(prefix="srt/"))
    return OK


def _apply(tree: SglangTree, force: bool, quiet: bool) -> int:
    report = _rewrite(tree)
    if report is None:
        return ERROR
    for file in transaction.apply(tree, report.changed, force=force):
        print(
            f"{tree.srt / file}: edited since apply; saved to {transaction.BACKUP_DIR}/"
            f"{transaction.EDITED}/{file} and patched again",
            file=sys.stderr,
        )
    if quiet:
        return OK
    for finding in report.unrouted:
        print(f"routed  {finding.format()}")
    sites = [f for f in report.unrouted if f.label in ("decode", "extend")]
    if report.changed:
        print(
            f"{len(sites)} sizing sites routed, {len(report.unrouted) - len(sites)} "
            f"other changes, in {len(report.changed)} files of {tree.srt}"
        )
    else:
        print(f"nothing to do: every sizing site of {tree.srt} is routed")
    return OK


def _revert(tree: SglangTree, force: bool) -> int:
    reverted = transaction.revert(tree, force=force)
    for file in reverted.edited:
        saved = tree.package / transaction.EDITED_DIR / file
        print(
            f"{tree.srt / file}: edited since apply; the edited file is kept in {saved}",
            file=sys.stderr,
        )
    return OK
