"""The change as a series of patches, one concern each, as SGLang's reviewers take it.

Patch k is the difference between the tree the rules write with the first k-1 concerns of the
tree's family (``families/<family>/concerns.py``) and the tree they write with the first k,
both from the release, so the series applied in order (``git am``) leaves exactly the tree
``apply`` writes, test files included.

The descriptions are Markdown files, ``families/<family>/descriptions/<concern>.md``, in the
sections of SGLang's pull-request template, written for a reviewer of SGLang who sees nothing
else: they name SGLang's files, configs, tests and commands only.
"""

from __future__ import annotations

import datetime
import email.utils
from dataclasses import dataclass, field
from pathlib import Path

from sglang_eagle_sizing import concerns
from sglang_eagle_sizing.engine import (
    Finding,
    FindingsCache,
    default_cache_dir,
    git_header,
    unified_diff,
)
from sglang_eagle_sizing.patch import TreeReport, check_tree, rewrite_tree
from sglang_eagle_sizing.tree import SglangTree, TreeError, _git


def is_test_file(key: str) -> bool:
    """Whether ``key`` (a path from the checkout root) is a test file or a test helper of
    SGLang's: under ``test/`` or ``python/sglang/test/``."""
    return key.startswith(("test/", "python/sglang/test/"))


#: the pull-request template's section that is the PR's, not a commit's
CHECKLIST = "## Checklist"


@dataclass(frozen=True)
class Patch:
    concern: str
    subject: str
    #: Markdown, in the sections of SGLang's pull-request template
    body: str

    @property
    def message(self) -> str:
        """The commit message's body: the description without its ``## Checklist`` (the
        checklist is the pull request's: ``pr`` prints it once, in the cover letter)."""
        return without_section(self.body, CHECKLIST)


def without_section(body: str, heading: str) -> str:
    """``body`` without the section under ``heading`` (up to the next ``## `` heading)."""
    lines = body.splitlines(keepends=True)
    out, skipping = [], False
    for line in lines:
        if line.startswith("## "):
            skipping = line.rstrip("\n") == heading
        if not skipping:
            out.append(line)
    return "".join(out).rstrip() + "\n"


@dataclass(frozen=True)
class PullRequest:
    """One pull request of a family's series: some of its concerns' patches, in order, with a
    cover letter (``pull_requests/<name>.md``: the template's sections but the checklist,
    which ``pr`` gathers from the patches)."""

    #: its folder's name after its number (``pr --series DIR`` writes ``DIR/<n>-<name>/``)
    name: str
    #: the pull request's title, in SGLang's style (``[Spec] ...``)
    title: str
    #: its concerns, in the order its patches land
    concerns: tuple[str, ...]
    #: the earlier pull requests (their ``name``) it applies after; none: on the release alone
    needs: tuple[str, ...] = ()


def read_patch(folder: Path, concern: str) -> Patch:
    """The patch of ``concern`` as its description file ``<folder>/<concern>.md`` says: the
    subject on the first line (a ``# `` heading), the body after it."""
    heading, _, body = (folder / f"{concern}.md").read_text().partition("\n")
    return Patch(concern, heading.removeprefix("# "), body.lstrip("\n"))


# -- the trees ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ReleaseTree(SglangTree):
    """A checkout read at its release tag: what the series is written against when the
    working tree is already (partly) patched."""

    tag: str = ""

    def _at_tag(self, key: str) -> str:
        return f"{self.tag}:{self.git_prefix + '/' if self.git_prefix else ''}{key}"

    def read(self, file: str) -> str:
        text = _git(self.root, "show", self._at_tag(self.key(file)))
        if text is None:
            raise TreeError(f"{self._at_tag(self.key(file))}: not in the release tag")
        return text

    def holds(self, key: str) -> bool:
        return _git(self.root, "cat-file", "-e", self._at_tag(key)) is not None


def release_of(tree: SglangTree) -> SglangTree:
    """The tree to write the change against: ``tree`` itself when nothing of the patch is in
    it, else the same checkout at its release tag."""
    report = check_tree(tree, FindingsCache(default_cache_dir()))
    touched = report.tests_present or any(
        f.status == Finding.ROUTED for f in report.findings
    )
    if not touched:
        return tree
    tag = None
    if tree.checkout is not None:
        found = _git(tree.checkout, "describe", "--tags", "--abbrev=0", "--match", "v[0-9]*")
        tag = found.strip() if found else None
    if not tag:
        raise TreeError(
            f"{tree.package}: already patched, and no v* git tag names the release to "
            "write the change against"
        )
    return ReleaseTree(
        tree.package, tree.checkout, tree.git_dir, tree.git_prefix, tree.version, tag
    )


def _texts(report: TreeReport) -> dict[str, str]:
    texts = {report.tree.key(r.file): r.new_text for r in report.results}
    texts.update({k: v.decode("utf-8") for k, v in report.modules_to_add.items()})
    texts.update({k: v.decode("utf-8") for k, v in report.tests_to_add.items()})
    return texts


@dataclass
class Step:
    patch: Patch
    #: ``{path from the checkout root: (text before, text after)}``; ``None``: no file
    files: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)

    def _body(self, key: str) -> str:
        """The unified diff of one file (computed once: difflib is the slow part)."""
        cache = self.__dict__.setdefault("_bodies", {})
        if key not in cache:
            old, new = self.files[key]
            if old is None:
                cache[key] = unified_diff("", new or "", "/dev/null", "b/" + key)
            else:
                cache[key] = unified_diff(old, new or "", "a/" + key, "b/" + key)
        return cache[key]

    def diff(self) -> str:
        out = []
        for key, (old, new) in sorted(self.files.items()):
            out.append(git_header(key, old is None) + self._body(key))
        return "".join(out)

    def counts(self) -> dict[str, tuple[int, int]]:
        """``{path: (lines added, lines removed)}``."""
        found = {}
        for key in self.files:
            lines = self._body(key).splitlines()[2:]
            added = sum(1 for line in lines if line.startswith("+"))
            removed = sum(1 for line in lines if line.startswith("-"))
            found[key] = (added, removed)
        return found

    def source_lines(self) -> int:
        return sum(a + r for k, (a, r) in self.counts().items() if not is_test_file(k))

    def test_lines(self) -> int:
        return sum(a + r for k, (a, r) in self.counts().items() if is_test_file(k))


def steps(tree: SglangTree, gpu_test: bool = False, progress=None) -> list[Step]:
    """The series for ``tree`` (a release, or a checkout patched from one): one step per
    concern of the family's ``patches(gpu_test)`` (``pr --with-gpu-test`` adds its GPU end-to-end
    test where it has one), each the difference between the tree with the concerns
    before it and with it. ``progress``: called with (patch number, patches, subject) before
    each is computed."""
    release = release_of(tree)
    written = tree.family.patches(gpu_test)
    every = tree.family.patches(True)
    if progress:
        progress(0, len(written), "the whole change")
    whole = rewrite_tree(release)
    if whole.unknown or whole.missing:
        raise TreeError(f"{tree.srt}: sizing sites the rules cannot handle; run check")
    before: dict[str, str] = {}
    out = []
    for count, patch in enumerate(written, start=1):
        if count == len(every):
            report = whole
        else:
            if progress:
                progress(count, len(written), patch.subject)
            with concerns.only(p.concern for p in written[:count]):
                report = rewrite_tree(release)
        after = _texts(report)
        step = Step(patch)
        originals = {release.key(r.file): r.old_text for r in report.results}
        for key, text in after.items():
            old = before[key] if key in before else originals.get(key)
            if old != text:
                step.files[key] = (old, text)
        for key in before.keys() - after.keys():  # a test file no later concern keeps
            step.files[key] = (before[key], None)
        before.update(after)
        out.append(step)
    return out


# -- format-patch ------------------------------------------------------------------------


def diffstat(step: Step) -> str:
    counts = step.counts()
    if not counts:
        return ""
    width = max(len(k) for k in counts)
    lines = [
        f" {k.ljust(width)} | {a + r:4d} {'+' * min(a, 40)}{'-' * min(r, 40)}"
        for k, (a, r) in sorted(counts.items())
    ]
    added = sum(a for a, _ in counts.values())
    removed = sum(r for _, r in counts.values())
    lines.append(
        f" {len(counts)} files changed, {added} insertions(+), {removed} deletions(-)"
    )
    return "\n".join(lines) + "\n"


def format_patch(step: Step, number: int, total: int, author: str, date: str) -> str:
    """One ``git format-patch`` file: ``git am --keep-non-patch`` keeps the ``[Spec]`` of
    the subject (plain ``git am`` strips every leading bracket); a series of one patch is
    ``[PATCH]``, as ``git format-patch`` writes it."""
    numbered = f"PATCH {number}/{total}" if total > 1 else "PATCH"
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"From: {author}\n"
        f"Date: {date}\n"
        f"Subject: [{numbered}] {step.patch.subject}\n"
        "\n"
        f"{step.patch.message.rstrip()}\n"
        "---\n"
        f"{diffstat(step)}\n"
        f"{step.diff()}"
        "-- \n"
        "2.43.0\n\n"
    )


def file_name(number: int, subject: str) -> str:
    words = "".join(c if c.isalnum() else "-" for c in subject)
    slug = "-".join(part for part in words.split("-") if part)[:52].rstrip("-")
    return f"{number:04d}-{slug}.patch"


def author_of(tree: SglangTree) -> str | None:
    if tree.checkout is None:
        return None
    name = (_git(tree.checkout, "config", "user.name") or "").strip()
    mail = (_git(tree.checkout, "config", "user.email") or "").strip()
    return f"{name} <{mail}>" if name and mail else None


#: the cover letter of each pull request's folder: the pull request's description, in the
#: sections of SGLang's template (a ``0000-cover-letter.patch`` holds no diff, and ``git am``
#: stops at it: "Patch is empty")
COVER_LETTER = "pull-request.md"


def request_folder(number: int, request: PullRequest) -> str:
    """``<n>-<name>``: the folders sort in the order they apply."""
    return f"{number}-{request.name}"


def write_patches(found: list[Step], folder: Path, author: str, date: str) -> list[Path]:
    """``found`` as ``git format-patch`` writes a branch of them: ``0001-<subject>.patch`` on."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for number, step in enumerate(found, start=1):
        path = folder / file_name(number, step.patch.subject)
        path.write_text(format_patch(step, number, len(found), author, date), encoding="utf-8")
        written.append(path)
    return written


def combined(found: list[Step]) -> Step:
    """The steps as one: each file from its text before the first to its text after the
    last (what a pull request's "Files changed" shows)."""
    files: dict[str, tuple[str | None, str | None]] = {}
    for step in found:
        for key, (old, new) in step.files.items():
            files[key] = (files[key][0] if key in files else old, new)
    return Step(found[0].patch if found else Patch("", "", ""), {
        k: (old, new) for k, (old, new) in files.items() if old != new
    })


def write_series(
    tree: SglangTree, folder: Path, author: str, gpu_test: bool = False, progress=None
) -> list[Path]:
    """The patch files, in ``folder``, in the order ``git am`` takes them (a family whose
    series is pull requests: ``pr.write_pull_requests``)."""
    found = [s for s in steps(tree, gpu_test, progress) if s.files]
    return write_patches(found, folder, author, now())


def now() -> str:
    """The ``Date:`` of the patches written now."""
    return email.utils.format_datetime(datetime.datetime.now(datetime.timezone.utc))
