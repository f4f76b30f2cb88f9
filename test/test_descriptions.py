"""The 0.5.9-0.5.11 patches' descriptions (``descriptions/<concern>.md``) against the code:
in the sections of SGLang's pull-request template; the test commands, test files and test
classes each names are the ones its patch adds (so a renamed or moved test cannot leave a
description behind); an accuracy section, saying once that no GPU ran, exactly where a patch
changes model-side code; nothing of this tool, its docs or a machine's paths."""

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


def test_accuracy_exactly_where_model_side_code_changes():
    model_side = {
        c
        for rule in RULES
        for c in rule.concerns
        if any(f.startswith(MODEL_SIDE) for f in (rule.files or ()))
    }
    with_accuracy = {p.concern for p in BEFORE_REFACTOR.patches(gpu_test=True) if "\n### Accuracy\n" in p.body}
    assert with_accuracy == model_side
    for concern in with_accuracy:
        accuracy = (
            _patch(concern).body.split("\n### Accuracy\n", 1)[1].split("\n## ", 1)[0]
        )
        assert accuracy.count("No GPU was used") == 1, concern
        assert "CUDA graphs and kernels were not run" in accuracy, concern
