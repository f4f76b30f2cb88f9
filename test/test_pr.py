"""``pr``: the cover letter (the table of sites from the site list and the lines the rules
find, one line per patch of the series, the checklist once, the files with their line
counts), under 60,000
characters so that it fits a pull request's description; with ``--diff`` followed by the same
diff ``diff`` prints; the tree is left as it
was; on a checkout already patched, the same change against its release tag; on a checkout
without ``test/`` yet, paths from the checkout root and the fork's tests included."""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import shutil
from pathlib import Path

import pytest
from conftest import git
from sglang_eagle_sizing.cli import main as cli_main
from sglang_eagle_sizing.families.release_0_5_11.sites import SITES
from sglang_eagle_sizing.patch import SITE_LABELS, check_tree
from sglang_eagle_sizing.tree import SglangTree
from sglang_eagle_sizing.families import BEFORE_REFACTOR

SECTIONS = ("## Sites", "## The series", "## Checklist", "## The diff")
FOREIGN = re.compile(r"sglang-eagle-sizing|sglang_eagle_sizing|docs/[a-z-]+\.md|sites-0\.5\.11|/work/")


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli_main(list(args))
    return code, out.getvalue()


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def release(pristine, tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("pr") / "sglang"
    shutil.copytree(pristine, copy)
    return copy


@pytest.fixture(scope="module")
def printed(release) -> str:
    before = _snapshot(release.parent)
    code, text = _cli("pr", "--diff", str(release))
    assert code == 0
    assert _snapshot(release.parent) == before  # nothing written, no backup, no lock
    return text


def _description(text: str) -> str:
    return text.split("## The diff", 1)[0]


def test_the_description_has_every_section_in_order(printed):
    positions = [printed.find("\n" + heading + "\n") for heading in SECTIONS]
    assert -1 not in positions, positions
    assert positions == sorted(positions)
    assert printed.startswith("# ")


def test_the_diff_is_what_diff_prints(printed, release):
    code, diff = _cli("diff", str(release))
    assert code == 0 and diff.startswith("diff --git a/")
    tail = printed.split("\n## The diff\n", 1)[1]
    fenced = re.search(r"\n(`{3,})diff\n(.*)\1\n\Z", tail, re.DOTALL)
    assert fenced, tail[:200]
    assert fenced.group(2) == diff


def test_the_cover_letter_fits_a_pull_request_description(printed, release):
    code, cover = _cli("pr", str(release))
    assert code == 0
    assert len(cover) < 60_000, len(cover)
    # the --diff output is the cover letter, then the diff
    assert printed.startswith(cover) and "```diff\ndiff --git a/" in printed[len(cover):]
    assert "```diff" not in cover
    # every changed file is named with its line counts
    stat = cover.split("\n## The diff\n", 1)[1]
    assert re.search(r"^sglang/srt/speculative/eagle_info\.py \| \+\d+ -\d+$", stat, re.M), stat


def test_every_site_is_listed_with_the_lines_check_finds(printed, release):
    findings = check_tree(SglangTree.locate(release)).unrouted
    description = _description(printed)
    for site in SITES:
        lines = sorted(
            f.line
            for f in findings
            if f.label in SITE_LABELS and (f.file, f.scope) == site.key
        )
        assert lines, site.key
        row = f"| `{site.file}:{','.join(map(str, lines))}` | `{site.scope}` | {site.phase.value} |"
        assert row in description, row
        if site.note:
            assert site.note in description


def test_the_series_is_an_index_of_its_patches_in_sglangs_terms(printed):
    """One line per patch, its subject, in order; the descriptions are the commits' messages,
    not repeated here; the template's checklist once."""
    description = _description(printed)
    patches = BEFORE_REFACTOR.patches()
    index = description.split("\n## The series\n\n", 1)[1].split("\n\n", 1)[0]
    assert index.splitlines() == [f"{n}. {p.subject}" for n, p in enumerate(patches, start=1)]
    for patch in patches:
        motivation = patch.body.split("## Motivation\n\n", 1)[1].split("\n\n", 1)[0]
        assert motivation not in description, patch.concern
    assert description.count("## Checklist") == 1 and "## Motivation" not in description
    assert printed.startswith("# [Spec] ")
    assert not FOREIGN.search(description), FOREIGN.search(description).group(0)


def test_a_patched_checkout_gives_the_change_against_its_release(checkout):
    code, before = _cli("pr", str(checkout))
    assert code == 0
    assert cli_main(["apply", "--quiet", str(checkout)]) == 0
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "patched")
    code, after = _cli("pr", str(checkout))
    assert code == 0
    assert after == before


def test_a_checkout_without_test_folder_gets_the_tests_at_their_paths(checkout):
    shutil.rmtree(checkout / "test")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "no tests")
    code, text = _cli("pr", str(checkout))
    assert code == 0
    stat = text.split("\n## The diff\n", 1)[1]
    assert "\npython/sglang/srt/speculative/eagle_info.py | +" in stat
    assert "\ntest/registered/unit/speculative/eagle_hidden_sizing/test_annotation.py | +" in stat
