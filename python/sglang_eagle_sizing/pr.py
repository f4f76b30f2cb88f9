"""``sglang-eagle-sizing pr [PATH]``: the upstream pull request, description and diff.

Everything that names SGLang's code is generated: the sites from ``sites.SITES`` joined with
the findings the rules make on the tree (the same findings ``check`` lists: each rule's report
on the original file), the diff from the same rewrite ``diff`` prints. The contract table and
the choices come from ``docs/design.md``, and "how it was tested" from the registrations of
the test files the patch adds to SGLang (``inserted_tests/``) and the docstrings of
``test/test_*.py``, so ``pr`` runs from a source checkout of this project (or an editable
install). Nothing is written to the tree.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from . import inserted
from .engine import Finding
from .patch import SITE_LABELS, TreeReport, rewrite_tree
from .sites import SITES, Site
from .tree import KNOWN_VERSION

HELP = "print the upstream PR: a Markdown description generated from the site table, then the diff"

OK, ERROR = 0, 2
PROJECT_ROOT = Path(__file__).resolve().parents[2]
DESIGN = PROJECT_ROOT / "docs" / "design.md"
TESTS = PROJECT_ROOT / "test"
CONTRACT_HEADING = "## The contract"
CHOICES_LEAD = "Choices made"

#: Which launch configurations load a file, by a part of its path (every match applies).
CONFIGS_BY_PATH: tuple[tuple[str, str], ...] = (
    ("speculative/eagle_info.py", "every EAGLE / EAGLE3 config"),
    (
        "managers/scheduler.py",
        "PD disaggregation (`--disaggregation-mode prefill|decode`)",
    ),
    (
        "multi_layer_",
        "`--enable-multi-layer-eagle` (on by itself for MiMoV2, Step3p5 EAGLE)",
    ),
    (
        "_worker.py",
        (
            "spec v1 (`--disable-overlap-schedule`, `SGLANG_ENABLE_SPEC_V2=0` or "
            "`--speculative-eagle-topk` > 1)"
        ),
    ),
    ("_worker_v2.py", "spec v2 (the default: overlap schedule, top-k 1)"),
    (
        "cuda_graph_runner.py",
        "CUDA graphs on (no `--disable-cuda-graph`), spec v1 and v2",
    ),
)

MOTIVATION = """\
SGLang {version} decides the width and dtype of EAGLE hidden states inline, at {sites} places in
{files} files, and the places disagree: the multi-layer worker widens to `hidden_size * 3` even
without aux hidden states, v2 idle inputs take the target's width where the draft's is consumed,
and the extend graph runner and the v1 idle input read different configs.

This PR states the contract once. `EagleDraftInput` (decode phase) and the new
`EagleDraftExtendInput` (extend phase) get the classmethods `hidden_size_for(worker)` and
`dtype_for(worker)`; every EAGLE worker reads its drafter's config and validates it against the
target before the draft model loads, and keeps `eagle_use_aux_hidden_state` and
`eagle_num_aux_hidden_states` from one parser (which reads the aux layer ids wherever the drafter
declares them, as the target's capture does); at `--dtype auto` a drafter whose config gives
another dtype than the target's (e.g. a float16 EAGLE-3 drafter on a bfloat16 target, which
crashed at the first request) is built in the target's dtype, with one log line; every idle
input, CUDA-graph buffer and PD metadata buffer is sized through the classmethods, and the
prefill and decode servers size the PD hidden-state buffer under one condition."""

#: What the rules' other findings (not sizing sites) stand for; an unknown label is shown as is.
OTHER_CHANGES = {
    "helpers": "module helpers: {helpers}",
    "decode-contract": "`hidden_size_for` / `dtype_for` classmethods (decode phase)",
    "extend-contract": "new class with `hidden_size_for` / `dtype_for` (extend phase)",
    "aux-flag": "drafter config read and validated before the draft model is built; "
    "`eagle_use_aux_hidden_state` and `eagle_num_aux_hidden_states` parsed once; the "
    "draft model's dtype decided (`get_eagle_draft_dtype`)",
    "draft_runner": "exposes `draft_runner`, the runner the classmethods resolve",
    "annotation": "quoted annotation of a name imported only under `TYPE_CHECKING`",
    "idle-attention": "idle input with empty attention index pointers (`kv_indptr`, "
    "`kv_indices`), which a padded idle batch under DP attention reads",
    "idle-device": "passes the worker's device to `EagleVerifyInput.create_idle_input` "
    "(was hard-coded `cuda`)",
    "idle-flashinfer": "FlashInfer's decode planner sums the rows `kv_indptr` has, so a padded "
    "idle batch under DP attention plans zero rows",
    "padded-decode": "Triton's decode attention attends the rows `kv_indptr` has, so a draft "
    "decode batch padded under DP attention after its metadata was built runs (padded rows "
    "zero)",
}


class PrError(Exception):
    """A file the description is generated from is missing or not in the expected shape."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="an sglang package folder (holding srt/) or a checkout root holding "
        "python/sglang and test/; default: the installed sglang",
    )
    from .cli import add_allow_flag

    add_allow_flag(parser)


def run(args: argparse.Namespace) -> int:
    from .cli import locate

    tree = locate(args, args.path)
    report = rewrite_tree(tree)
    try:
        text = pull_request(report)
    except PrError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ERROR
    sys.stdout.write(text)
    return OK


# -- the diff ----------------------------------------------------------------------------


def unified_diff(report: TreeReport) -> str:
    """What ``sglang-eagle-sizing diff`` prints for this tree (on a checkout, with the fork's
    test files it adds)."""
    return report.diff()


def _fenced(text: str, language: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}{fence}\n"


# -- what docs/design.md says --------------------------------------------------------------


def _section(lines: list[str], heading: str) -> list[str]:
    starts = [i for i, line in enumerate(lines) if line.startswith(heading)]
    if not starts:
        raise PrError(f"{DESIGN}: no '{heading}' section")
    body = lines[starts[0] + 1 :]
    ends = [i for i, line in enumerate(body) if line.startswith("## ")]
    return body[: ends[0]] if ends else body


def _design_lines() -> list[str]:
    try:
        return DESIGN.read_text(encoding="utf-8").splitlines()
    except OSError:
        raise PrError(
            f"{DESIGN}: not found; run pr from a checkout of sglang-eagle-sizing"
        ) from None


def contract_table() -> list[str]:
    table = [
        line
        for line in _section(_design_lines(), CONTRACT_HEADING)
        if line.startswith("|")
    ]
    if len(table) < 3:
        raise PrError(f"{DESIGN}: no table under '{CONTRACT_HEADING}'")
    return table


def choices() -> list[str]:
    """The bullets after "Choices made ...", each joined to one line."""
    section = _section(_design_lines(), CONTRACT_HEADING)
    leads = [i for i, line in enumerate(section) if line.startswith(CHOICES_LEAD)]
    if not leads:
        raise PrError(f"{DESIGN}: no '{CHOICES_LEAD}' list under '{CONTRACT_HEADING}'")
    bullets: list[str] = []
    for line in section[leads[0] + 1 :]:
        if line.startswith("- "):
            bullets.append(line[2:].strip())
        elif line.startswith("  ") and bullets:
            bullets[-1] += " " + line.strip()
        elif line.strip() and bullets:
            break
    if not bullets:
        raise PrError(f"{DESIGN}: the '{CHOICES_LEAD}' list is empty")
    return bullets


# -- how it was tested -------------------------------------------------------------------


def test_summaries() -> list[tuple[str, str]]:
    """``(file, the first paragraph of its docstring)`` for each ``test/test_*.py``."""
    files = sorted(TESTS.glob("test_*.py"))
    if not files:
        raise PrError(
            f"{TESTS}: no test files; run pr from a checkout of sglang-eagle-sizing"
        )
    summaries = []
    for path in files:
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        first = " ".join(docstring.split("\n\n")[0].split()) or "(no module docstring)"
        summaries.append((f"test/{path.name}", first.replace("``", "`")))
    return summaries


#: The test files the patch adds to SGLang, at their paths in a checkout.
INSERTED_TESTS = Path(__file__).resolve().parent / "inserted_tests"
#: SGLang's CI registration call -> what the suite runs on.
SUITE_HARDWARE = {"register_cpu_ci": "CPU", "register_cuda_ci": "CUDA"}


def added_tests() -> list[str]:
    """One line per test file the PR adds to SGLang: its path, the suite it is registered
    in (read from its ``register_*_ci`` call) and whether it was run here."""
    files = sorted(INSERTED_TESTS.rglob("*.py"))
    if not files:
        raise PrError(f"{INSERTED_TESTS}: no test files to add to SGLang")
    lines = []  # (run here, line): the CPU tests first
    for path in files:
        module = ast.parse(path.read_text(encoding="utf-8"))
        suites = [
            (SUITE_HARDWARE.get(node.value.func.id, node.value.func.id), keyword.value.value)
            for node in module.body
            if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id.startswith("register_")
            for keyword in node.value.keywords
            if keyword.arg == "suite" and isinstance(keyword.value, ast.Constant)
        ]
        if not suites:
            raise PrError(f"{path}: not registered in an SGLang CI suite")
        where = ", ".join(f"{hardware} suite `{suite}`" for hardware, suite in suites)
        run_here = all(hardware == "CPU" for hardware, _ in suites)
        if run_here:
            ran = (
                "run here with `python3` on the patched tree, and shown to fail on "
                "every mutant of it (a site put back to 0.5.11, a rule or a path "
                "around the sites broken) and to pass on an unrelated change; the "
                "table is sglang-eagle-sizing's docs/fork-tests.md"
            )
        else:
            ran = (
                "**not run here** (no GPU); its imports, registration and server "
                "arguments were checked"
            )
        relative = path.relative_to(INSERTED_TESTS).as_posix()
        lines.append((not run_here, f"- `{relative}` ({where}): {ran}."))
    return [line for _, line in sorted(lines)]


# -- the sites ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteChange:
    site: Site
    lines: tuple[int, ...]

    @property
    def configs(self) -> str:
        return configs_for(self.site.file)


def configs_for(file: str) -> str:
    found = [text for part, text in CONFIGS_BY_PATH if part in file]
    return "; ".join(found) or "configs that load this file"


def site_changes(findings: list[Finding]) -> list[SiteChange]:
    changes = []
    for site in SITES:
        lines = sorted(
            f.line
            for f in findings
            if f.status == Finding.UNROUTED
            and f.label in SITE_LABELS
            and (f.file, f.scope) == site.key
        )
        if lines:
            changes.append(SiteChange(site, tuple(lines)))
    return changes


def other_changes(findings: list[Finding]) -> list[Finding]:
    return [
        f
        for f in findings
        if f.status == Finding.UNROUTED and f.label not in SITE_LABELS
    ]


def inserted_helpers() -> list[str]:
    """The public functions the patch inserts into ``eagle_info.py``."""
    module = ast.parse(inserted.HELPERS)
    return [
        node.name
        for node in module.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    ]


def describe(label: str) -> str:
    helpers = ", ".join(f"`{name}`" for name in inserted_helpers())
    return OTHER_CHANGES.get(label, label).format(helpers=helpers)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def sites_section(changes: list[SiteChange], others: list[Finding]) -> list[str]:
    out = [
        "## Sites changed",
        "",
        "| site (0.5.11 line) | `Class.method` | phase | kind | worker | configs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for change in changes:
        site = change.site
        where = f"`{site.file}:{','.join(map(str, change.lines))}`"
        worker = f"`{site.worker}`" if site.worker else "(none in reach)"
        cells = [
            where,
            f"`{site.scope}`",
            site.phase.value,
            site.kind.value,
            worker,
            change.configs,
        ]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    if others:
        out += ["", "Other changes the sites need:", ""]
        out += [
            f"- `{f.file}:{f.line}` `{f.scope}`: {describe(f.label)}" for f in others
        ]
    return out


def behaviour_section(changes: list[SiteChange]) -> list[str]:
    out = [
        "## Behaviour changes",
        "",
        "Choices made where the sizing was ambiguous:",
        "",
    ]
    out += [f"- {choice}" for choice in choices()]
    noted = [c for c in changes if c.site.note]
    if noted:
        out += ["", "At the sites, with the configs they affect:", ""]
        out += [
            f"- `{c.site.scope}` ({c.site.phase.value}; {c.configs}): {c.site.note}"
            for c in noted
        ]
    return out


def pull_request(report: TreeReport) -> str:
    """The description, then the diff."""
    if report.unknown or report.missing:
        raise PrError(
            f"{report.tree.srt}: sizing sites the rules cannot handle; run check"
        )
    if not report.changed and not report.tests_to_add:
        raise PrError(
            f"{report.tree.srt}: every site is already routed; the PR would be empty"
        )
    changes = site_changes(report.findings)
    files = {c.site.file for c in changes}
    sections = [
        ["# EAGLE: one contract for the width and dtype of draft hidden states", ""],
        ["## Motivation", ""]
        + MOTIVATION.format(
            version=KNOWN_VERSION,
            sites=sum(len(c.lines) for c in changes),
            files=len(files),
        ).split("\n"),
        ["## The contract", ""] + contract_table(),
        sites_section(changes, other_changes(report.findings)),
        behaviour_section(changes),
        ["## How it was tested", "", "Tests this PR adds to SGLang:", ""]
        + added_tests()
        + ["", "The refactor's own test suite (sglang-eagle-sizing):", ""]
        + [f"- `{name}`: {summary}" for name, summary in test_summaries()],
        ["## The diff", ""],
    ]
    description = "\n\n".join("\n".join(section).rstrip("\n") for section in sections)
    return description + "\n\n" + _fenced(unified_diff(report), "diff")
