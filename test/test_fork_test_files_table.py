"""docs/fork-tests.md's table of the fork's CPU test files is scripts/fork_test_files_table.py's
output for the files as they are (regenerated in memory; no SGLang imported), and it follows
what the files hold."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import fork_test_files_table as files_table  # noqa: E402


def test_the_table_in_the_docs_is_the_scripts():
    document = files_table.DOC.read_text()
    assert (
        files_table.replaced(document, files_table.table()) == document
    ), "docs/fork-tests.md's cpu files table is stale: run scripts/fork_test_files_table.py"


def _row(text: str, name: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.startswith(f"| `{name}` |")]
    return line.strip("| ").split(" | ")


def test_the_table_follows_the_files(tmp_path):
    """A test method added to a copy of the folder shows in its row's lines and tests, and a
    test file no concern claims is refused by name."""
    folder = tmp_path / "inserted_tests"
    shutil.copytree(files_table.INSERTED_TESTS, folder)
    before = _row(files_table.table(folder), "test_dtype.py")
    test_file = folder / files_table.CPU_TEST_DIR / "test_dtype.py"
    source = test_file.read_text()
    anchor = "class TestOneDtypeAtDtypeAuto(WorkerTestCase):\n"
    assert anchor in source
    test_file.write_text(
        source.replace(
            anchor, anchor + "    def test_added(self):\n        pass\n\n", 1
        )
    )
    after = _row(files_table.table(folder), "test_dtype.py")
    assert int(after[2]) == int(before[2]) + 3 and int(after[3]) == int(before[3]) + 1
    (folder / files_table.CPU_TEST_DIR / "test_unclaimed.py").write_text("")
    with pytest.raises(
        files_table.TableError, match="test_unclaimed.py: a test file with no"
    ):
        files_table.table(folder)


def test_a_missing_folder_is_one_line_naming_the_constant(tmp_path):
    with pytest.raises(files_table.TableError, match="INSERTED_TESTS at the top of"):
        files_table.table(tmp_path / "moved")
