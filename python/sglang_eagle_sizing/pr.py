"""``sglang-eagle-sizing pr [--series DIR] [--diff] [PATH]``: the change as SGLang's reviewers
take it.

With ``--series DIR``: one ``git format-patch`` file per concern (the family's ``patches``), which
``git am --keep-non-patch DIR/*.patch`` applies in order on a git checkout of the release (a
family whose series is pull requests, ``series.PULL_REQUESTS``: one folder each,
``DIR/<n>-<name>/``, with its cover letter ``pull-request.md``; ``DIR/*/*.patch``),
leaving the tree ``apply`` writes but for the GPU end-to-end test file, which has never run
and comes only with ``--with-gpu-test`` (as the last patch); each patch's message is its
description without the template's checklist. Without ``--series``: a cover letter that
fits a pull request's description (under ``COVER_LIMIT`` characters: GitHub takes 65,536):
a short summary, on 0.5.9-0.5.11 the table of sites generated from the family's
``sites.SITES`` and the lines the rules find, one line per patch (its subject: its
description is its commit's message), the template's checklist once for the series, and the
files the change touches with their line counts; the diff itself is in the patches, or
appended with ``--diff``. On a checkout already patched,
the change is written against its release tag. Nothing is written to the tree.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sglang_eagle_sizing import concerns
from sglang_eagle_sizing.tree import TreeError, display

if TYPE_CHECKING:  # loaded when the command runs (series, the engine, the rules)
    from sglang_eagle_sizing.engine import Finding
    from sglang_eagle_sizing.patch import TreeReport

HELP = (
    "print the change for SGLang's reviewers: a cover letter and the diff, or with --series "
    "DIR a git format-patch series, one concern a patch (0.5.23: a folder per pull request)"
)

OK, ERROR = 0, 2
#: the cover letter's title for SGLang 0.5.23's series
AFTER_REFACTOR_TITLE = "[Spec] EAGLE-3: one reading of the drafter for capture, fc and buffers"
#: the most characters the cover letter may have (a GitHub PR description takes 65,536)
COVER_LIMIT = 60_000

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

TITLE = "[Spec] One contract for the width and dtype of EAGLE hidden states"

SUMMARY = """\
SGLang decides the width and dtype of `EagleDraftInput.hidden_states` inline, at {sites} places
in {files} files (idle inputs, CUDA-graph buffers, PD metadata buffers), and the places
disagree. This series states the contract once, in
`EagleDraftInput.hidden_size_for` / `dtype_for` (decode) and
`EagleDraftExtendInput.hidden_size_for` / `dtype_for` (extend), with what it needs first: one
parser of the drafter's `eagle_config`, the target capturing the layers the drafter names, a
check of the drafter before its weights load, and one dtype for the hidden states. It is
{count} patches, each reviewable and testable alone (`git am --keep-non-patch` keeps their
`[Spec]` titles); each commit's message is its description: motivation, modifications, tests,
accuracy tests and benchmark."""

AFTER_REFACTOR_SUMMARY = """\
SGLang reads an EAGLE-3 drafter's config for the target's capture, the drafter's `fc` and
the hidden-state buffers; this series makes every reader take one reading, checks the drafter
against its target at start-up, and fixes what serving EAGLE showed broken beside it. It is
{count} patches, each reviewable and testable alone (`git am --keep-non-patch` keeps their
`[Spec]` titles); each commit's message is its description (motivation, modifications,
accuracy tests, benchmark), with the patches it needs where it needs any."""


class PrError(Exception):
    """The change cannot be written for this tree."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="an sglang package folder (holding srt/) or a checkout root holding "
        "python/sglang; default: the installed sglang",
    )
    parser.add_argument(
        "--series",
        metavar="DIR",
        help="write the change as git format-patch files into DIR (created if missing); "
        "on 0.5.23 one folder per pull request, each with its pull-request.md",
    )
    parser.add_argument(
        "--with-gpu-test",
        action="store_true",
        help="also write the GPU end-to-end test (two GPUs, CUDA suite) as the last patch; "
        "left out by default: it has never run",
    )
    parser.add_argument(
        "--diff",
        action="store_true",
        help="append the whole diff to the cover letter (too long for a PR description: "
        "the patches of --series carry it)",
    )
    parser.add_argument(
        "--author",
        metavar="'NAME <EMAIL>'",
        help="the From: of each patch; default: the checkout's git user.name and user.email",
    )
    from sglang_eagle_sizing.cli import add_allow_flag

    add_allow_flag(parser)


def output_folder(path: str, option: str) -> Path:
    """``path`` as a folder to write into, checked before any slow work: a ``TreeError`` (one
    line) if it is a file, or a folder that cannot be made or written."""
    from sglang_eagle_sizing.tree import display

    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise TreeError(
            f"{display(folder)}: not a folder ({option} DIR takes a folder); nothing written"
        )
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise TreeError(
            f"{display(existing)}: not a folder (in {option} {path}); nothing written"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise TreeError(f"{display(existing)}: not writable; nothing written")
    return folder


def run(args: argparse.Namespace) -> int:
    from sglang_eagle_sizing.cli import locate

    if args.series is not None:
        output_folder(args.series, "--series")
    tree = locate(args, args.path)
    # the engine and the rules: after the checks that refuse at once
    from sglang_eagle_sizing import series

    try:
        if args.series is not None:
            author = args.author or series.author_of(tree)
            if not author:
                raise PrError(
                    "no author for the patches: pass --author 'NAME <EMAIL>' or set "
                    "git user.name and user.email"
                )
            progress = _progress if sys.stderr.isatty() else None
            if tree.family.pull_requests:
                written = write_pull_requests(tree, Path(args.series), author, progress)
            else:
                written = series.write_series(
                    tree, Path(args.series), author, args.with_gpu_test, progress
                )
            for path in written:
                print(path)
            if progress:
                _progress_done()
            return OK
        text = pull_request(tree, args.with_gpu_test, with_diff=args.diff)
    except (PrError, TreeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ERROR
    sys.stdout.write(text)
    return OK


def _progress(number: int, total: int, subject: str) -> None:
    """One status line on a terminal, rewritten in place."""
    width = shutil.get_terminal_size((100, 20)).columns - 1
    what = f"patch {number}/{total}: {subject}" if number else subject
    line = f"computing {what}"[:width]
    sys.stderr.write("\r\x1b[K" + line)
    sys.stderr.flush()


def _progress_done() -> None:
    sys.stderr.write("\r\x1b[K")
    sys.stderr.flush()


def _fenced(text: str, language: str) -> str:
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}{fence}\n"


# -- the sites ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteChange:
    #: a site of the family's list (``sites.SITES``)
    site: object
    lines: tuple[int, ...]

    @property
    def configs(self) -> str:
        return configs_for(self.site.file)


def configs_for(file: str) -> str:
    found = [text for part, text in CONFIGS_BY_PATH if part in file]
    return "; ".join(found) or "configs that load this file"


def site_changes(findings: list[Finding], sites: tuple) -> list[SiteChange]:
    from sglang_eagle_sizing.engine import Finding
    from sglang_eagle_sizing.patch import SITE_LABELS

    changes = []
    for site in sites:
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


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def sites_section(changes: list[SiteChange]) -> list[str]:
    out = [
        "## Sites",
        "",
        "| site (release line) | `Class.method` | phase | kind | worker | configs |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for change in changes:
        site = change.site
        where = f"`{site.file}:{','.join(map(str, change.lines))}`"
        worker = f"`{site.worker}`" if site.worker else "(none in reach)"
        cells = [where, f"`{site.scope}`", site.phase.value, site.kind.value, worker, change.configs]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    noted = [c for c in changes if c.site.note]
    if noted:
        out += [""] + [f"- `{c.site.scope}`: {c.site.note}" for c in noted]
    return out


def series_index(written) -> list[str]:
    """One line per patch, in order: the series as a pull request lists its commits (each
    commit's message carries its description)."""
    return [f"{number}. {patch.subject}" for number, patch in enumerate(written, start=1)]


_BOX = re.compile(r"^- \[([ x])\] (.*)$")


def checklist(written) -> list[str]:
    """The template's checklist once, for the whole series: a box is ticked when every patch
    ticks it; what patches say after a box (their test files, why not needed) is kept under
    it, by patch number, once per distinct note ("above" in a note: the commit's message)."""
    from sglang_eagle_sizing.series import CHECKLIST

    boxes: list[tuple[str, list[bool], dict[str, list[int]]]] = []
    for number, patch in enumerate(written, start=1):
        section = patch.body.split(f"\n{CHECKLIST}\n", 1)
        if len(section) < 2:
            continue
        lines = [m for m in map(_BOX.match, section[1].split("\n## ", 1)[0].splitlines()) if m]
        for index, match in enumerate(lines):
            text, _, note = match.group(2).partition("): ")
            text = text + ")" if note else text
            if index == len(boxes):
                boxes.append((text, [], {}))
            boxes[index][1].append(match.group(1) == "x")
            if note:
                note = note.replace("(above)", "(see the commit's message)")
                boxes[index][2].setdefault(note, []).append(number)
    if not boxes:
        return []
    out = [CHECKLIST, ""]
    for text, ticks, notes in boxes:
        box = f"- [{'x' if all(ticks) else ' '}] {text}"
        if len(notes) == 1 and len(next(iter(notes.values()))) == len(written):
            out.append(f"{box}: {next(iter(notes))}")  # every patch says the same
            continue
        out.append(box)
        for note, numbers in notes.items():
            out.append(f"  - {', '.join(map(str, numbers))}: {note}")
    return out


def diffstat(report: TreeReport) -> str:
    """The files the change touches, with lines added and removed (``git diff --stat``'s
    numbers), fenced."""
    from sglang_eagle_sizing.engine import unified_diff

    rows = []
    for result in report.changed:
        rows.append((report.tree.key(result.file), result.old_text, result.new_text))
    for key, data in report.files_to_add().items():
        rows.append((key, "", data.decode("utf-8")))
    lines = []
    for key, old, new in sorted(rows):
        body = unified_diff(old, new, "a", "b").splitlines()[2:]
        added = sum(1 for line in body if line.startswith("+"))
        removed = sum(1 for line in body if line.startswith("-"))
        lines.append(f"{key} | +{added} -{removed}")
    return _fenced("\n".join(lines) + "\n", "")


def _after_refactor_pull_request(report: TreeReport, written, with_diff: bool) -> str:
    """0.5.23's cover letter: the title, what the series is, one line per patch, the
    checklist, then the files it touches (one patch: its description, as its pull request)."""
    if len(written) == 1:
        sections = [[f"# {written[0].subject}", "", written[0].body.rstrip()]]
    else:
        sections = [
            [f"# {AFTER_REFACTOR_TITLE}", ""],
            AFTER_REFACTOR_SUMMARY.format(count=len(written)).split("\n"),
            ["## The series", "", *series_index(written)],
            checklist(written),
        ]
    files = len(report.changed) + len(report.modules_to_add) + len(report.tests_to_add)
    sections.append(
        [
            "## The diff" if len(written) == 1 else "## The diff of the series",
            "",
            f"{files} files.",
            "",
            diffstat(report).rstrip("\n"),
        ]
    )
    cover = "\n\n".join("\n".join(section).rstrip("\n") for section in sections if section) + "\n"
    if with_diff:
        cover += "\n" + _fenced(report.diff(), "diff")
    return cover


def _quoted(titles: list[str]) -> str:
    quoted = [f'"{t}"' for t in titles]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def needs_line(request, requests) -> str:
    """The line of a cover letter naming the pull requests to apply first ("" for none)."""
    titles = {r.name: r.title for r in requests}
    needed = [titles[name] for name in request.needs if name in titles]
    if not needed:
        return ""
    several = "s" if len(needed) > 1 else ""
    order = ", in that order" if len(needed) > 1 else ""
    return f"Needs the pull request{several} {_quoted(needed)} (applied first{order})."


def measured_on_line(release: str | None, measured: str) -> str:
    """For a series of another release than the one its sections were measured on: the line
    saying so ("" for the same release)."""
    if release is None or release == measured:
        return ""
    return (
        f"This series is for SGLang {release}: the same fix, written in {release}'s code.\n"
        f"The reproductions and figures below were run on v{measured}; run them on "
        f"{release} before merging."
    )


def cover_letter(request, found, requests, sections: str, release: str | None = None,
                 measured: str | None = None) -> str:
    """A pull request's cover letter (its folder's ``pull-request.md``), as its description
    on GitHub: its title, the pull requests it needs, the release its figures come from when
    the series is for another (``measured_on_line``), its sections (``sections``: Motivation
    to Benchmark & Profiling), one line per commit (each commit's message is its patch's
    description), the template's checklist once, and the files with their line counts."""
    from sglang_eagle_sizing.series import combined

    patches = [step.patch for step in found]
    whole = combined(found)
    needs = needs_line(request, requests)
    measured_on = measured_on_line(release, measured or release)
    parts = [
        [f"# {request.title}"],
        [needs] if needs else [],
        [measured_on] if measured_on else [],
        [sections.strip()],
        ["## Commits", "", *series_index(patches)],
        checklist(patches),
        ["## The diff", "", f"{len(whole.files)} files.", "", _stat(whole).rstrip("\n")],
    ]
    return "\n\n".join("\n".join(part).rstrip("\n") for part in parts if part) + "\n"


def write_pull_requests(tree, folder: Path, author: str, progress=None) -> list[Path]:
    """The family's series as its pull requests (``series.PULL_REQUESTS``): one folder each,
    ``<n>-<name>/``, its patches numbered from 1 and its cover letter
    (``series.COVER_LETTER``); the patch files, in the order ``git am`` takes them."""
    from sglang_eagle_sizing import series

    found = [s for s in series.steps(tree, False, progress) if s.files]
    by_concern = {step.patch.concern: step for step in found}
    # a pull request whose concerns the release does not have (its note says why) is not
    # written: a cover letter with no commit would be a pull request of nothing
    requests = [
        r for r in tree.family.pull_requests if any(c in by_concern for c in r.concerns)
    ]
    release = tree.version.number if tree.version is not None else None
    date = series.now()
    written = []
    for number, request in enumerate(requests, start=1):
        own = [by_concern[c] for c in request.concerns if c in by_concern]
        place = folder / series.request_folder(number, request)
        written += series.write_patches(own, place, author, date)
        text = cover_letter(
            request, own, requests, tree.family.cover_letter(request), release,
            tree.family.known_version,
        )
        (place / series.COVER_LETTER).write_text(text, encoding="utf-8")
    return written


def _stat(step) -> str:
    rows = [f"{key} | +{a} -{r}" for key, (a, r) in sorted(step.counts().items())]
    return _fenced("\n".join(rows) + "\n", "")


def pull_request(tree, gpu_test: bool = False, with_diff: bool = False) -> str:
    """The cover letter (the files and their line counts, not the diff: it would not fit a
    pull request's description), then with ``with_diff`` the whole diff (against the release
    tag on a patched checkout); the GPU end-to-end test only with ``gpu_test``."""
    from sglang_eagle_sizing import series
    from sglang_eagle_sizing.engine import FindingsCache, default_cache_dir
    from sglang_eagle_sizing.patch import check_tree, rewrite_tree

    release = series.release_of(tree)
    written = tree.family.patches(gpu_test)
    with concerns.only(p.concern for p in written):
        report: TreeReport = rewrite_tree(release)
    if report.unknown or report.missing:
        raise PrError(f"{display(tree.srt)}: sizing sites the rules cannot handle; run check")
    if not report.changed and not report.tests_to_add and not report.modules_to_add:
        raise PrError(f"{display(tree.srt)}: nothing to change")
    if not tree.family.sites:  # upstream routes every site: the changes, no site table
        return _after_refactor_pull_request(report, written, with_diff)
    findings = check_tree(release, FindingsCache(default_cache_dir())).findings
    changes = site_changes(findings, tree.family.sites)
    files = {c.site.file for c in changes}
    sections = [
        [f"# {TITLE}", ""],
        SUMMARY.format(
            sites=sum(len(c.lines) for c in changes),
            files=len(files),
            count=len(written),
        ).split("\n"),
        sites_section(changes),
        ["## The series", "", *series_index(written)],
        checklist(written),
    ]
    sections.append(
        [
            "## The diff",
            "",
            f"{len(report.changed) + len(report.tests_to_add)} files; the diff of each "
            "concern is in its patch of the series.",
            "",
            diffstat(report).rstrip("\n"),
        ]
    )
    description = "\n\n".join(
        "\n".join(section).rstrip("\n") for section in sections if section
    )
    cover = description + "\n"
    if with_diff:
        cover += "\n" + _fenced(report.diff(), "diff")
    return cover
