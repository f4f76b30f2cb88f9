"""``sglang-eagle-sizing report``: for a drafter/target pair, what serving it does on the
patched and the released tree, the target class's capture rule, and every sizing site's width
and dtype (0.5.9-0.5.11: and bytes), by the tree's own code, judged by the family of the tree
read (``--sglang``, else the installed sglang; ``report/__init__.py`` for 0.5.9-0.5.11,
``report/release_0_5_23.py`` after upstream's refactor), or ``--disagreements``'s table."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglang_eagle_sizing.families import BEFORE_REFACTOR
from sglang_eagle_sizing.report import (
    BUNDLED,
    algorithm_of,
    build,
    quiet_sglang,
    render,
)
from sglang_eagle_sizing.report.disagreements import table
from sglang_eagle_sizing.report.release_0_5_23 import ReportError
from sglang_eagle_sizing.tree import SglangTree, TreeError

HELP = (
    "print, for a drafter/target pair, what serving it does on the patched and the released "
    "tree, the target class's capture rule (EAGLE-3), and every site's width and dtype"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("draft", nargs="?", type=Path, help="drafter config folder (default: the bundled pair)")
    parser.add_argument("target", nargs="?", type=Path, help="target config folder")
    parser.add_argument("--algorithm", choices=("EAGLE", "EAGLE3", "STANDALONE"), help="default: from the drafter's architecture")
    parser.add_argument(
        "--sglang",
        metavar="PATH",
        help="the SGLang tree whose code is evaluated, by the rules of its release family "
        "(default: the installed sglang); the report's first line names it",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--disagreements",
        metavar="DATA_DIR",
        type=Path,
        help="print, as Markdown, every config of the pairs under DATA_DIR where 0.5.11's "
        "sites disagree (the source of docs/disagreements.md; 0.5.9-0.5.11 trees only)",
    )


def run(args) -> int:
    from sglang_eagle_sizing.report.configs import ConfigError, precheck

    if args.disagreements is not None:
        try:
            tree = SglangTree.locate(args.sglang, allow_untested_version=True)
        except TreeError as exc:
            return _error(exc)
        if tree.family is not BEFORE_REFACTOR:
            return _error(
                f"{tree.describe()}: --disagreements reads SGLang {BEFORE_REFACTOR.name} trees only"
            )
        quiet_sglang()
        sys.stdout.write(table(args.disagreements, SglangTree.locate(args.sglang)))
        return 0
    if (args.draft is None) != (args.target is None):
        return _error("give both DRAFT and TARGET folders, or neither")
    draft = args.draft or BUNDLED / "draft"
    target = args.target or BUNDLED / "target"
    try:  # before SGLang is imported (tens of seconds)
        architecture = precheck(draft)["architectures"][0]
        precheck(target)
    except ConfigError as exc:
        return _error(exc)
    try:  # the tree read: --sglang's, else the installed one; its family's code judges
        tree = SglangTree.locate(args.sglang, allow_untested_version=True)
    except TreeError as exc:
        return _error(exc)
    if args.sglang is None:
        _note_a_checkout_here(tree)
    try:
        if tree.family is not BEFORE_REFACTOR:
            # each tree evaluated in its own environment (report/release_0_5_23.py)
            from sglang_eagle_sizing.report import release_0_5_23 as after

            algorithm = args.algorithm or algorithm_of(architecture)
            report = after.build(draft.resolve(), target.resolve(), algorithm, tree)
            text = after.render
        else:
            quiet_sglang()
            report = build(draft, target, args.algorithm, tree)
            text = render
    except (ConfigError, ValueError, TreeError, ReportError) as exc:
        if not args.json:  # the tree it judged by, then why it stopped
            print(_header(tree))
        return _error(exc)
    if args.json:  # a refused pair too: each tree's answer, with the refusal in it
        print(json.dumps(report, indent=2))
    else:  # a refused pair too: each tree's verdict, then the refusal
        sys.stdout.write(text(report))
    if report["refusal"] is not None:
        return _error(report["refusal"])
    return 0


def _header(tree: SglangTree) -> str:
    """The first line of the report, for a run stopped before the report was built."""
    from sglang_eagle_sizing.report import serving
    from sglang_eagle_sizing.report.release_0_5_23 import is_patched

    try:
        patched = is_patched(tree)
    except TreeError:
        return f"report: {tree.describe()}"
    return serving.header({"described": tree.describe(), "patched": patched})


def _note_a_checkout_here(tree: SglangTree) -> None:
    """Without --sglang the installed sglang is judged: say so when the working folder is an
    SGLang checkout of its own, which the user may have meant."""
    here = Path.cwd() / "python" / "sglang"
    if (here / "srt").is_dir() and here.resolve() != tree.package.resolve():
        print(
            f"note: judged the installed sglang ({tree.describe()}), not the checkout here; "
            "--sglang . judges the checkout",
            file=sys.stderr,
        )


def _error(message) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2
