"""``pr --series``: the change as one ``git format-patch`` file per concern, which ``git am``
takes on a git checkout of 0.5.11 and which leaves, byte for byte, the tree ``apply`` writes;
each patch small, titled in SGLang's style, described in SGLang's terms, and its tests passing
on the tree as it stands after it (the fork test at a sample of the commits here; every commit
in scripts/series_table.py, whose table this checks)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, git_status

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
from series_check import (  # noqa: E402
    TABLE_END,
    TABLE_START,
    check_commit,
    git_am,
    table,
    write_series,
)
from sglang_eagle_sizing import (
    concerns,  # noqa: E402
)
from sglang_eagle_sizing.cli import main as cli_main  # noqa: E402
from sglang_eagle_sizing.families.release_0_5_11 import concerns as concerns_0_5_11
from sglang_eagle_sizing.families.release_0_5_11 import fork_test_slices  # noqa: E402
from sglang_eagle_sizing.families import BEFORE_REFACTOR

#: the commits whose fork test CI runs (1-based): the first with the worker harness (the
#: parser) and the routing, where the sizing tests land
SAMPLED = (2, 6)
#: what a patch of SGLang names nowhere: this tool, its docs, its mutation runs, a machine path
FOREIGN = re.compile(
    r"sglang-eagle-sizing|sglang_eagle_sizing|docs/[a-z-]+\.md|sites-0\.5\.11|/work/|/tmp/|mutant"
)


@pytest.fixture(scope="module")
def written(checkout_source, tmp_path_factory):
    work = tmp_path_factory.mktemp("series")
    checkout = work / "fork"
    shutil.copytree(checkout_source, checkout, symlinks=True)
    steps, patches = write_series(checkout, work / "patches")
    assert git_status(checkout) == []  # pr writes nothing to the tree
    commits = git_am(checkout, work / "clone", patches)
    return checkout, work / "clone", steps, patches, commits


def test_git_am_of_the_series_leaves_the_tree_apply_writes(written, tmp_path):
    """All but the GPU end-to-end test, which the default series leaves out."""
    checkout, clone, _, patches, commits = written
    default = BEFORE_REFACTOR.patches()
    assert len(commits) == len(patches) == len(default) == len(BEFORE_REFACTOR.patches(gpu_test=True)) - 1
    applied = tmp_path / "applied"
    shutil.copytree(checkout, applied, symlinks=True)
    assert cli_main(["apply", "--quiet", str(applied)]) == 0
    gpu_test = Path(fork_test_slices.E2E_TEST)
    assert (applied / gpu_test).is_file() and not (clone / gpu_test).exists()
    shutil.rmtree(applied / gpu_test.parents[1])  # test/registered/spec: the GPU test alone
    result = subprocess.run(
        ["diff", "-r", "-x", ".git", str(applied), str(clone)],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout[:2000]


def test_the_gpu_test_is_an_opt_in_last_patch_of_that_file_alone():
    """``pr --with-gpu-test`` adds the GPU end-to-end test as the last patch: no rule writes
    its concern, so the patch is the test file alone."""
    from sglang_eagle_sizing.families.release_0_5_11.rules import RULES
    from sglang_eagle_sizing.patch import inserted_test_files

    assert BEFORE_REFACTOR.patches(gpu_test=True)[:-1] == BEFORE_REFACTOR.patches()
    assert BEFORE_REFACTOR.patches(gpu_test=True)[-1].concern == concerns_0_5_11.E2E_TEST
    assert BEFORE_REFACTOR.patches()[-1].concern != concerns_0_5_11.E2E_TEST
    assert not any(concerns_0_5_11.E2E_TEST in rule.concerns for rule in RULES)
    with concerns.only(p.concern for p in BEFORE_REFACTOR.patches()):
        assert fork_test_slices.E2E_TEST not in inserted_test_files(BEFORE_REFACTOR)
    assert fork_test_slices.E2E_TEST in inserted_test_files(BEFORE_REFACTOR)


#: Lines of SGLang's files a later patch changes after an earlier one added them, and why: the
#: norm-variants patch routes every call of the drafter's fc through apply_fc, drafter-fc's too.
CHANGED_LATER = {
    ("python/sglang/srt/models/llama_eagle3.py", "return self.fc(hidden_states)"),
}


def test_no_patch_takes_back_what_an_earlier_one_added(written):
    """Each line of SGLang's files a patch adds stays in every later patch (the fork test's
    slices grow their import lines as they grow: test files aside)."""
    from sglang_eagle_sizing.engine import unified_diff

    _, _, steps, _, _ = written
    added: dict[tuple[str, str], int] = {}
    taken_back = []
    for number, step in enumerate(steps, start=1):
        for key, (old, new) in sorted(step.files.items()):
            if fork_test_slices.is_test_file(key):
                continue
            lines = unified_diff(old or "", new or "", "a", "b").splitlines()[2:]
            for line in lines:
                text = line[1:].strip()
                if line.startswith("-") and (key, line[1:]) in added and text:
                    if (key, text) not in CHANGED_LATER:
                        taken_back.append((number, added[(key, line[1:])], key, text))
            for line in lines:
                if line.startswith("+"):
                    added[(key, line[1:])] = number
    assert taken_back == [], taken_back


def test_each_commit_keeps_its_subject_in_sglangs_style(written):
    _, clone, _, _, _ = written
    subjects = subprocess.run(
        ["git", "log", "--reverse", "--format=%s", f"HEAD~{len(BEFORE_REFACTOR.patches())}..HEAD"],
        cwd=clone, capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    assert subjects == [p.subject for p in BEFORE_REFACTOR.patches()]
    assert all(re.match(r"\[(Spec|Attention)\] [A-Z]", s) for s in subjects)


def test_each_patch_is_small_and_speaks_of_sglang_only(written):
    _, _, steps, patches, _ = written
    for step, path in zip(steps, patches):
        text = path.read_text()
        assert step.source_lines() <= 250, (path.name, step.source_lines())
        for heading in ("## Motivation", "## Modifications", "### Tests", "## Checklist"):
            assert heading in step.patch.body, (path.name, heading)
        # the commit's message: the description but its checklist (the pull request's)
        message = text.split("\n---\n", 1)[0]
        assert "\n## Accuracy Tests\n" in message and "## Checklist" not in message, path.name
        assert not FOREIGN.search(text), (path.name, FOREIGN.search(text).group(0))


@pytest.mark.parametrize("number", SAMPLED)
def test_the_fork_test_passes_after_the_patch(written, number):
    _, clone, steps, _, commits = written
    commit = check_commit(clone, commits[number - 1], steps[number - 1], run_fork_test=True)
    ran, failed = commit.fork_test
    assert failed == () and ran > 0, commit
    assert commit.new_pyflakes == set(), commit.new_pyflakes


def test_the_table_in_the_docs_is_what_the_series_gives(written):
    """Every column but the fork test's is computed here for every commit; the fork test's
    column is taken from the docs (scripts/series_table.py ran it on every commit) and must
    say every commit passed."""
    _, clone, steps, _, commits = written
    rows = [check_commit(clone, c, s, run_fork_test=False) for c, s in zip(commits, steps)]
    document = (REPO / "docs" / "series.md").read_text()
    recorded = document[document.index(TABLE_START) : document.index(TABLE_END)]
    recorded_rows = [line for line in recorded.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(recorded_rows) == len(rows)
    for row, line in zip(rows, recorded_rows):
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        assert cells[2:5] == [str(row.files), str(row.source_lines), str(row.test_lines)], line
        assert cells[5].endswith("tests OK") or cells[5] == "(no CPU test yet)", line
        row.fork_test = (int(cells[5].split()[0]), ()) if cells[5].endswith("OK") else None
        row.failing_before = _recorded_failures(cells[6])
    assert table(rows) in document


def _recorded_failures(cell: str) -> tuple[str, ...] | None:
    if cell == "(adds no CPU test)":
        return None
    if cell == "the file does not load":
        return ("(the file does not load)",)
    return () if cell == "all pass" else ("",) * int(cell.split()[0])


def test_a_test_file_without_a_concern_is_refused():
    from sglang_eagle_sizing.families.release_0_5_11.fork_test_slices import (
        CPU_TEST_DIR,
        SliceError,
        slice_cpu_tests,
    )

    source = "import unittest\n\n\nclass TestNew(unittest.TestCase):\n    def test_x(self):\n        pass\n"
    with concerns.only(concerns_0_5_11.prefix(2)):
        with pytest.raises(SliceError, match="test_new.py has no concern"):
            slice_cpu_tests({f"{CPU_TEST_DIR}/test_new.py": source})


def test_each_patch_adds_the_test_files_of_its_concern_and_the_harness_they_import():
    """Patch k's CPU folder: the files of the concerns landed so far, whole; each harness
    module cut to what they import (none: left out), in SGLang's test package; each compiles
    (pyflakes on every commit: test_the_table_in_the_docs_is_what_the_series_gives)."""
    from sglang_eagle_sizing.families.release_0_5_11.fork_test_slices import (
        CPU_TEST_DIR,
        HARNESS,
        HARNESS_DIR,
        TEST_CONCERNS,
    )
    from sglang_eagle_sizing.patch import inserted_test_files

    whole = inserted_test_files(BEFORE_REFACTOR)
    landed: set[str] = set()
    for count, concern in enumerate(concerns_0_5_11.ORDER[:-1], start=1):
        landed |= {name for name, c in TEST_CONCERNS.items() if c == concern}
        with concerns.only(concerns_0_5_11.prefix(count)):
            files = inserted_test_files(BEFORE_REFACTOR)
        names = {key.rsplit("/", 1)[-1] for key in files}
        assert {n for n in names if n.startswith("test_")} == landed, concern
        assert "__init__.py" in names and names <= {"__init__.py", *HARNESS, *landed}
        for key, data in files.items():
            folder = HARNESS_DIR if key.rsplit("/", 1)[-1] in HARNESS else CPU_TEST_DIR
            assert key == f"{folder}/{key.rsplit('/', 1)[-1]}", key
            if key.rsplit("/", 1)[-1] in landed:
                assert data == whole[key], key
            compile(data, key, "exec")
