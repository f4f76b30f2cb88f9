"""``sglang-eagle-sizing report``: what a tree computes for a drafter/target pair (every sizing
site's width and dtype, bytes on 0.5.9-0.5.11; the draft model's dtype; the captured states), by the tree's own code (``report/__init__.py`` for 0.5.9-0.5.11,
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
    "print what the tree computes for a drafter/target pair: each sizing site's width and "
    "dtype (and, on 0.5.9-0.5.11, bytes), the draft model's dtype and the hidden states the "
    "target captures"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("draft", nargs="?", type=Path, help="drafter config folder (default: the bundled pair)")
    parser.add_argument("target", nargs="?", type=Path, help="target config folder")
    parser.add_argument("--algorithm", choices=("EAGLE", "EAGLE3", "STANDALONE"), help="default: from the drafter's architecture")
    parser.add_argument("--sglang", metavar="PATH", help="the SGLang tree whose code is evaluated (default: the installed sglang)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--disagreements",
        metavar="DATA_DIR",
        type=Path,
        help="print, as Markdown, every config of the pairs under DATA_DIR where 0.5.11's "
        "sites disagree (the source of docs/disagreements.md)",
    )


def run(args) -> int:
    from sglang_eagle_sizing.report.configs import ConfigError, precheck

    tree = None
    if args.sglang is not None:
        try:
            tree = SglangTree.locate(args.sglang, allow_untested_version=True)
        except TreeError as exc:
            return _error(exc)
    after_refactor = tree is not None and tree.family is not BEFORE_REFACTOR
    if args.disagreements is not None:
        if after_refactor:
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
    try:
        if after_refactor:
            # each tree evaluated in its own environment (report/release_0_5_23.py)
            from sglang_eagle_sizing.report import release_0_5_23 as after

            algorithm = args.algorithm or algorithm_of(architecture)
            report = after.build(draft.resolve(), target.resolve(), algorithm, tree)
            text = after.render
        else:
            quiet_sglang()
            report = build(draft, target, args.algorithm, SglangTree.locate(args.sglang))
            text = render
    except (ConfigError, ValueError, TreeError, ReportError) as exc:
        return _error(exc)
    if args.json:  # a refused pair too: each tree's answer, with the refusal in it
        print(json.dumps(report, indent=2))
    if report["refusal"] is not None:
        return _error(report["refusal"])
    if not args.json:
        sys.stdout.write(text(report))
    return 0


def _error(message) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2
