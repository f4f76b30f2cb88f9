"""The 0.5.9-0.5.11 patches' descriptions (``descriptions/<concern>.md``) against the code:
in the sections of SGLang's pull-request template; the test commands, test files and test
classes each names are the ones its patch adds (so a renamed or moved test cannot leave a
description behind); an accuracy section in each, saying once that no GPU ran; nothing of this
tool, its docs or a machine's paths. Of both families' series: every subject under 72
characters, and each commit's message the description without its checklist."""

from __future__ import annotations

import ast
import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest
from sglang_eagle_sizing import concerns, series
from sglang_eagle_sizing.families.release_0_5_11 import concerns as concerns_0_5_11
from sglang_eagle_sizing.families.release_0_5_11 import series as series_0_5_11
from sglang_eagle_sizing.families.release_0_5_11.fork_test_slices import (
    CPU_TEST_DIR,
    E2E_TEST,
    HARNESS_DIR,
    TEST_CONCERNS,
)
from sglang_eagle_sizing.families.release_0_5_11.rules import RULES
from sglang_eagle_sizing.patch import inserted_test_files
from sglang_eagle_sizing.families import BEFORE_REFACTOR

SECTIONS = (
    "## Motivation",
    "## Modifications",
    "### Tests",
    "## Accuracy Tests",
    "## Benchmark & Profiling",
    "## Checklist",
)
#: the boxes of SGLang's template (.github/pull_request_template.md), by their first words
BOXES = (
    "Format your code",
    "Add unit tests",
    "Update documentation",
    "Provide throughput / latency benchmark results",
    "For reviewers:",
    "Please feel free to join our Slack channel",
)
FOREIGN = re.compile(
    r"mutant|sglang-eagle-sizing|sglang_eagle_sizing|docs/[a-z-]+\.md|/work/|/tmp/"
    r"|speculators[^.\n]*\b\d+\.\d+\.\d+|putting back",
    re.IGNORECASE,
)
#: where a patch's code is model-side (the template asks for accuracy results there)
MODEL_SIDE = ("models/", "model_executor/")


def _patch(concern: str) -> series.Patch:
    return next(p for p in BEFORE_REFACTOR.patches(gpu_test=True) if p.concern == concern)


def _test_files(concern: str) -> list[str]:
    if concern == concerns_0_5_11.E2E_TEST:
        return [E2E_TEST]
    return [
        f"{CPU_TEST_DIR}/{name}" for name, c in TEST_CONCERNS.items() if c == concern
    ]


def test_the_package_ships_its_descriptions():
    """pyproject's package data covers every description (a wheel without them has no
    ``BEFORE_REFACTOR.patches()``)."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    setuptools = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["sglang_eagle_sizing"]
    package = Path(series.__file__).resolve().parent
    for path in series_0_5_11.DESCRIPTIONS.glob("*.md"):
        name = path.relative_to(package).as_posix()
        assert any(fnmatch(name, pattern) for pattern in patterns), name


def test_every_concern_has_its_file_and_nothing_else():
    assert sorted(p.name for p in series_0_5_11.DESCRIPTIONS.glob("*")) == sorted(
        f"{c}.md" for c in concerns_0_5_11.ORDER
    )
    assert tuple(p.concern for p in BEFORE_REFACTOR.patches(gpu_test=True)) == concerns_0_5_11.ORDER
    for path in series_0_5_11.DESCRIPTIONS.glob("*.md"):
        assert path.read_text().startswith("# [Spec] "), path.name


@pytest.mark.parametrize("concern", concerns_0_5_11.ORDER)
def test_the_sections_of_sglangs_template_in_order(concern):
    body = _patch(concern).body
    positions = [
        body.find(f"\n{s}\n") if i else body.find(f"{s}\n")
        for i, s in enumerate(SECTIONS)
    ]
    assert -1 not in positions and positions == sorted(positions), (concern, positions)
    boxes = re.findall(
        r"^- \[([ x])\] (.*)$", body.split("## Checklist", 1)[1], re.MULTILINE
    )
    assert len(boxes) == len(BOXES) and all(
        text.startswith(first) for (_, text), first in zip(boxes, BOXES)
    ), concern
    assert not FOREIGN.search(body), (concern, FOREIGN.search(body).group(0))


@pytest.mark.parametrize("concern", concerns_0_5_11.ORDER)
def test_the_commands_and_paths_named_are_the_patchs_own(concern):
    body = _patch(concern).body
    commands = re.findall(r"`python3 ([^`]+)`", body)
    assert commands == _test_files(concern), concern
    count = concerns_0_5_11.ORDER.index(concern) + 1
    with concerns.only(concerns_0_5_11.prefix(count)):
        landed = inserted_test_files(BEFORE_REFACTOR)
    named = re.findall(r"`((?:test/registered|python/sglang/test)/[^`\s]+\.py)`", body)
    for path in named:
        assert path in landed, (concern, path)
    # a harness module named bare (`cases.py`) is one the patch adds
    for name in re.findall(r"`(\w+\.py)`", body):
        if f"{HARNESS_DIR}/{name}" in inserted_test_files(BEFORE_REFACTOR):
            assert f"{HARNESS_DIR}/{name}" in landed, (concern, name)


@pytest.mark.parametrize(
    "concern", [c for c in concerns_0_5_11.ORDER if c != concerns_0_5_11.E2E_TEST]
)
def test_the_test_classes_named_are_in_the_patchs_test_files(concern):
    files = inserted_test_files(BEFORE_REFACTOR)
    defined: dict[str, set[str]] = {}
    for key in _test_files(concern):
        for node in ast.parse(files[key]).body:
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, set()).update(
                    n.name for n in node.body if isinstance(n, ast.FunctionDef)
                )
    named = re.findall(r"`(Test\w+)(?:\.(test_\w+))?`", _patch(concern).body)
    assert named, concern
    for cls, method in named:
        assert cls in defined, (concern, cls)
        assert not method or method in defined[cls], (concern, cls, method)


def _section(body: str, heading: str) -> str:
    return body.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("concern", concerns_0_5_11.ORDER)
def test_each_accuracy_section_says_what_ran_and_that_no_gpu_did(concern):
    """As 0.5.23's: what was served or run on the CPU, and once that no GPU was used; where
    the patch changes model-side code, that neither CUDA graphs nor kernels ran."""
    model_side = {
        c
        for rule in RULES
        for c in rule.concerns
        if any(f.startswith(MODEL_SIDE) for f in (rule.files or ()))
    }
    accuracy = " ".join(_section(_patch(concern).body, "## Accuracy Tests").split())
    assert accuracy.count("No GPU was used") == 1, concern
    if concern in model_side:
        assert "CUDA graphs and kernels were not run" in accuracy, concern


def _both_series():
    from sglang_eagle_sizing.families import AFTER_REFACTOR

    return [
        (family.name, patch)
        for family in (BEFORE_REFACTOR, AFTER_REFACTOR)
        for patch in family.patches(gpu_test=True)
    ]


def test_every_subject_of_both_series_is_under_72_characters():
    """git's and SGLang's reviewers' limit for a commit subject (``git am`` keeps it as the
    commit's first line)."""
    long = [
        f"{family} {patch.concern}: {len(patch.subject)} characters"
        for family, patch in _both_series()
        if len(patch.subject) >= 72
    ]
    assert long == [], long


def test_each_commit_message_is_the_description_without_its_checklist():
    """The checklist is the pull request's (``pr`` prints it once); a commit keeps the
    template's other sections, in order."""
    for family, patch in _both_series():
        message = patch.message
        assert series.CHECKLIST not in message, (family, patch.concern)
        assert patch.body.startswith(message.rstrip()), (family, patch.concern)
        headings = re.findall(r"^## (.+)$", message, re.M)
        assert headings[0] == "Motivation" and "Accuracy Tests" in headings, (
            family,
            patch.concern,
            headings,
        )
        assert headings[-1] != "Checklist", (family, patch.concern)
