"""0.5.23's series as pull requests (``families/release_0_5_23/series.py``: ``PULL_REQUESTS``):
the grouping covers every concern once, in the series' order; each pull request needs only
earlier ones, and those hold every patch its own patches need; each cover letter
(``pull_requests/<name>.md``) has the sections of SGLang's template but the checklist, says
that no GPU ran, and every figure of its Accuracy Tests is the one the recorded CPU run gave
(``benchmark/smoke-runs/``). The 0.5.11 family keeps its flat series. (``pr --series`` on a
checkout, ``git am`` of the folders and each pull request on the release:
test_release_0_5_23.py.)"""

from __future__ import annotations

import json
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest
import tomllib
from sglang_eagle_sizing import families, series
from sglang_eagle_sizing.families.release_0_5_23 import concerns
from sglang_eagle_sizing.families.release_0_5_23 import series as after_refactor

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmark" / "smoke-runs"
LETTERS = after_refactor.DESCRIPTIONS.with_name("pull_requests")
REQUESTS = after_refactor.PULL_REQUESTS
SECTIONS = ("## Motivation", "## Modifications", "## Accuracy Tests", "## Benchmark & Profiling")
#: what a cover letter names nowhere: this tool, its docs, its runs' names, a machine path
FOREIGN = re.compile(
    r"mutant|sglang-eagle-sizing|sglang_eagle_sizing|docs/[a-z-]+\.md|/work/|/tmp/|smoke"
    r"|-v2\b|speculators[^.\n]*\b\d+\.\d+\.\d+",
    re.IGNORECASE,
)

#: Each row of a cover letter's Accuracy Tests table: the recorded run it gives the figures
#: of, ``(row's first cell, run file, case)``.
RECORDED: dict[str, list[tuple[str, str, str]]] = {
    "eagle3-drafter-config": [
        ("Qwen3-MoE target (4 layers), drafter ids `[0, 1, 2]` in `eagle_config`",
         "classes-0.5.23.json", "qwen3-moe-eagle3-specforge-v2"),
        ("DeepSeek-V3 target (6 layers, MLA), drafter ids `[1, 2, 4]` in `eagle_config`",
         "classes-0.5.23.json", "deepseek-v3-eagle3-specforge-v2"),
        ("GPT-OSS target (4 layers), drafter ids `[1, 2, 4]` in `eagle_config`",
         "classes-0.5.23.json", "gpt-oss-eagle3-specforge-v2"),
        ("Llama target (4 layers), drafter ids in `eagle_config`",
         "0.5.23-5-full-series.json", "eagle3-v2"),
        ("Llama target (4 layers), 3 drafter ids at the top level",
         "0.5.23-5-full-series.json", "eagle3-toplevel-ids-v2"),
        ("Llama target (6 layers), 4 drafter ids in `eagle_config`",
         "0.5.23-5-full-series.json", "eagle3-4ids-v2"),
        ("Llama target (6 layers), 4 drafter ids at the top level",
         "0.5.23-5-full-series.json", "eagle3-4ids-toplevel-v2"),
        ("Llama target (4 layers), EAGLE-3 under PD (a prefill and a decode server)",
         "0.5.23-5-full-series.json", "eagle3-pd-v2"),
    ],
    "speculators-format": [
        ("Qwen3-MoE target (4 layers), speculators ids `[1, 2, 3]`",
         "classes-0.5.23.json", "qwen3-moe-eagle3-speculators-v2"),
        ("DeepSeek-V3 target (6 layers, MLA), speculators ids `[3, 4, 5]`",
         "classes-0.5.23.json", "deepseek-v3-eagle3-speculators-v2"),
        ("DeepSeek-V3 target (6 layers, MLA), speculators ids `[1, 3, 5]`",
         "classes-deepseek-v3-first-index-1-0.5.23.json", "deepseek-v3-eagle3-speculators-v2"),
        ("GPT-OSS target (4 layers), speculators ids `[1, 2, 4]`",
         "classes-final-boundary-0.5.23.json", "gpt-oss-eagle3-speculators-v2"),
        ("Gemma-3 target (4 layers), speculators ids `[1, 2, 4]`",
         "classes-final-boundary-0.5.23.json", "gemma3-eagle3-speculators-v2"),
        ("Llama target (6 layers), speculators ids `[1, 2, 3, 4]`",
         "0.5.23-4-series.json", "eagle3-speculators-4ids-v2"),
        ("Llama target (6 layers), speculators ids `[1, 3, 4]`",
         "0.5.23-4-series.json", "eagle3-speculators-3ids-v2"),
    ],
    "draft-dtype": [
        ("Llama target (4 layers, float16), bfloat16 EAGLE-3 drafter",
         "0.5.23-4-series.json", "eagle3-bf16-drafter-fp16-target-v2"),
    ],
    "gemma3-capture": [
        ("Gemma-3 target (4 layers), drafter ids `[0, 1, 2]` in `eagle_config`",
         "classes-0.5.23.json", "gemma3-eagle3-specforge-v2"),
    ],
    "standalone-pd": [
        ("STANDALONE under PD, Llama target (4 layers)",
         "0.5.23-3-pd-dp-attention.json", "standalone-pd-v2"),
    ],
    "idle-verify-input": [
        ("Qwen3 target (4 layers), DP attention, one rank idle",
         "0.5.23-3-pd-dp-attention.json", "eagle3-dp-attention-v2"),
    ],
}


def _letter(name: str) -> str:
    return (LETTERS / f"{name}.md").read_text()


def _run(file: str) -> tuple[dict, str]:
    """The run's report and the day it ran (``YYYY-MM-DD``)."""
    data = json.loads((RUNS / file).read_text())
    report = data.get("report", data)
    return report, (data.get("when") or report["when"]).split()[0]


def _case(file: str, case: str) -> dict:
    return next(c for c in _run(file)[0]["cases"] if c["case"] == case)


def _captured(side: dict) -> str:
    """A run's capture as the letters write it: ``output_hidden_states`` indices."""
    labels = (side.get("capture") or {}).get("captured")
    if not labels:
        return "-"
    return ", ".join(
        f"{label[:-4]} (before the final norm)" if label.endswith("-pre") else label
        for label in labels
    )


def _rows(letter: str) -> list[list[str]]:
    section = letter.split("\n## Accuracy Tests\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    return [line.strip("| ").split(" | ") for line in lines[1:] if "---" not in line]


def test_the_pull_requests_cover_every_concern_once_in_the_series_order():
    assert tuple(c for r in REQUESTS for c in r.concerns) == concerns.ORDER
    assert tuple(p.concern for p in after_refactor.patches()) == concerns.ORDER
    names = [r.name for r in REQUESTS]
    assert len(set(names)) == len(names)
    assert families.AFTER_REFACTOR.pull_requests == REQUESTS
    assert families.BEFORE_REFACTOR.pull_requests == ()  # 0.5.11: one flat series


def test_each_pull_request_needs_earlier_ones_holding_what_its_patches_need():
    landed: dict[str, set[str]] = {}
    for request in REQUESTS:
        assert set(request.needs) <= set(landed), request.name  # earlier ones only
        before = set().union(*(landed[n] for n in request.needs))
        for concern in request.concerns:
            missing = set(after_refactor.NEEDS.get(concern, ())) - before
            assert not missing, (request.name, concern, missing)
            before.add(concern)
        landed[request.name] = before


def test_each_title_is_in_sglangs_style():
    for request in REQUESTS:
        assert re.fullmatch(r"\[Spec\] [A-Z][^\n]{10,}", request.title), request.title
        assert len(request.title) <= 72, request.title
    # a pull request of one patch is titled as its patch
    subjects = {p.concern: p.subject for p in after_refactor.patches()}
    for request in REQUESTS:
        if len(request.concerns) == 1:
            assert request.title == subjects[request.concerns[0]], request.name


def test_the_package_ships_every_cover_letter_and_nothing_else():
    assert sorted(p.name for p in LETTERS.iterdir()) == sorted(f"{r.name}.md" for r in REQUESTS)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["sglang_eagle_sizing"]
    package = Path(series.__file__).resolve().parent
    for path in LETTERS.glob("*.md"):
        name = path.relative_to(package).as_posix()
        assert any(fnmatch(name, pattern) for pattern in patterns), name


@pytest.mark.parametrize("name", [r.name for r in REQUESTS])
def test_each_cover_letter_has_the_templates_sections_and_says_no_gpu_ran(name):
    letter = _letter(name)
    assert letter.startswith(SECTIONS[0] + "\n"), name  # the title is the data's
    positions = [letter.find(s + "\n") for s in SECTIONS]
    assert -1 not in positions and positions == sorted(positions), (name, positions)
    assert "## Checklist" not in letter  # gathered from the patches by pr
    accuracy = letter.split("\n## Accuracy Tests\n", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"\bNo GPU ran\b", accuracy), name
    assert "python -m sglang.launch_server" in accuracy, name  # the command run
    assert not FOREIGN.search(letter), (name, FOREIGN.search(letter).group(0))


@pytest.mark.parametrize("name", [r.name for r in REQUESTS])
def test_each_figure_of_a_cover_letter_is_the_recorded_runs(name):
    """Tokens, both accept lengths and the capture, cell by cell, from the run each row names;
    no row without a recorded run, and the day of each run said."""
    letter = _letter(name)
    rows = _rows(letter)
    assert [r[0] for r in rows] == [label for label, _, _ in RECORDED[name]], name
    for row, (label, file, case) in zip(rows, RECORDED[name]):
        entry = _case(file, case)
        tree, release = entry["tree"], entry["release"]
        assert tree["status"] == "served", (label, tree["status"])
        tokens = "differ" if any("tokens differ" in p for p in entry["problems"]) else "equal"
        assert row[1] == tokens, (label, row[1])
        if release["status"] == "served":
            assert row[2] == f"{release['accept_length']:.3f}", (label, row[2])
        else:
            quoted = re.fullmatch(r"fails: (`+)(.+?)\1", row[2])
            assert quoted and quoted.group(2) in release["error"], (label, row[2])
        assert row[3] == f"{tree['accept_length']:.3f}", (label, row[3])
        assert row[4] == _captured(tree), (label, row[4])
        for ids in re.findall(r"`(\[[\d, ]+\])`", label):
            assert ids in entry["description"], (label, ids)
        assert _run(file)[1] in letter, (name, file)
