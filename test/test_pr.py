"""``pr``: the PR description, generated from the site table and the rules' findings, then the
same diff ``diff`` prints; the tree is left as it was."""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from sglang_eagle_sizing.cli import main as cli_main
from sglang_eagle_sizing.patch import SITE_LABELS, check_tree
from sglang_eagle_sizing.sites import SITES
from sglang_eagle_sizing.tree import SglangTree

SECTIONS = (
    "## Motivation",
    "## The contract",
    "## Sites changed",
    "## Behaviour changes",
    "## How it was tested",
    "## The diff",
)


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


TEST_FILES_AT_PRINT: list[str] = []


@pytest.fixture(scope="module")
def printed(release) -> str:
    before = _snapshot(release.parent)
    # The test files as pr sees them (a file added while the tests run is not its concern).
    TEST_FILES_AT_PRINT[:] = sorted(p.name for p in (REPO / "test").glob("test_*.py"))
    code, text = _cli("pr", str(release))
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
    assert code == 0 and diff.startswith("--- a/")
    tail = printed.split("\n## The diff\n", 1)[1]
    fenced = re.fullmatch(r"\n(`{3,})diff\n(.*)\1\n", tail, re.DOTALL)
    assert fenced, tail[:200]
    assert fenced.group(2) == diff


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
    for finding in findings:
        if finding.label not in SITE_LABELS:
            assert f"`{finding.file}:{finding.line}` `{finding.scope}`" in description


def test_the_contract_and_choices_come_from_the_design_doc(printed):
    design = (REPO / "docs" / "design.md").read_text()
    description = _description(printed)
    table = [
        line
        for line in design.split("## The contract", 1)[1].splitlines()
        if line.startswith("|")
    ]
    table = table[: next(i for i, line in enumerate(table) if "extend" in line) + 1]
    assert "\n".join(table) in description
    assert "**Extend dtype: the draft's, which is the target's.**" in description


def test_how_it_was_tested_names_every_test_file(printed):
    description = _description(printed)
    assert "test_pr.py" in TEST_FILES_AT_PRINT
    for name in TEST_FILES_AT_PRINT:
        assert f"- `test/{name}`: " in description


def test_how_it_was_tested_says_which_tests_the_pr_adds_and_where_they_run(printed):
    description = _description(printed)
    section = description.split("## How it was tested", 1)[1]
    cpu = "- `test/registered/unit/speculative/test_eagle_hidden_sizing.py` (CPU suite `stage-a-test-cpu`): run here"
    cuda = "- `test/registered/spec/eagle/test_eagle_hidden_sizing_e2e.py` (CUDA suite `stage-b-test-2-gpu-large`): **not run here** (no GPU)"
    assert cpu in section and cuda in section


def test_an_already_patched_tree_has_no_pr(patched_root, capsys):
    assert cli_main(["pr", str(patched_root / "sglang")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and "already routed" in captured.err
