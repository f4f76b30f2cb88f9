"""scripts/upstream_tests_table.py without upstream's files: one ``error:`` line for an absent or
broken cache, and the junit reading and table on a real pytest run of a small made-up file.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "upstream_tests_table.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("upstream_tests_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_absent_cache_is_one_error_line(tmp_path):
    missing = tmp_path / "nowhere"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(missing)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: {missing}: no such folder; fetch upstream's test files into it first"
    ]
    assert result.stdout == ""


@pytest.mark.parametrize(
    "sources, says",
    [
        (None, "SOURCES.json: no such file"),
        ("{", "SOURCES.json: not JSON"),
        ('{"files": {}}', 'SOURCES.json: needs "files"'),
        ('{"files": {"test/test_x.py": "abc"}}', "test_x.py: listed in SOURCES.json"),
    ],
)
def test_broken_cache_names_the_file(script, tmp_path, sources, says):
    if sources is not None:
        (tmp_path / "SOURCES.json").write_text(sources)
    with pytest.raises(script.InputError, match=says.replace("{", r"\{")):
        script.read_sources(tmp_path)


def test_missing_markers_name_the_doc(script, tmp_path):
    with pytest.raises(
        script.InputError, match="doc.md: no <!-- upstream-tests-0.5.23"
    ):
        script.replaced("# no markers\n", "x", tmp_path / "doc.md")


SAMPLE = """\
import pytest


class TestThing:
    def test_passes(self):
        assert 1 + 1 == 2

    def test_fails(self):
        assert [1] == [2], "width 16384 != 12288"


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    if n == 2:
        raise ImportError("libcuda.so.1: cannot open shared object file")


def test_chained():
    try:
        raise AttributeError("no attribute 'supports_spec_v2'")
    except AttributeError:
        raise Exception("retry() exceed maximum number of retries.")


@pytest.mark.skip(reason="no GPU")
def test_skipped():
    pass
"""


def test_a_real_pytest_run_becomes_rows(script, tmp_path):
    folder = tmp_path / "test" / "registered" / "unit"
    folder.mkdir(parents=True)
    (folder / "test_sample.py").write_text(SAMPLE)
    path = "test/registered/unit/test_sample.py"
    (tmp_path / "SOURCES.json").write_text(json.dumps({"files": {path: "0" * 40}}))
    assert script.read_sources(tmp_path) == ({path: "0" * 40}, {})

    got = script.run_file(tmp_path, path, tmp_path, python=Path(sys.executable))
    assert {k: v[0] for k, v in got.items()} == {
        f"{path}::TestThing::test_passes": "pass",
        f"{path}::TestThing::test_fails": "fail",
        f"{path}::test_param[1]": "pass",
        f"{path}::test_param[2]": "fail (needs CUDA here)",
        f"{path}::test_chained": "fail",
        f"{path}::test_skipped": "skipped",
    }
    # a chained failure shows its original error, as upstream's retry wrapper re-raises
    assert (
        got[f"{path}::test_chained"][1]
        == "AttributeError: no attribute 'supports_spec_v2'"
    )
    assert got[f"{path}::TestThing::test_fails"][1].startswith(
        "AssertionError: width 16384"
    )

    # the same file passing everything on the "release", failing on the "patched" tree
    released = {test: ("pass", "") for test in got}
    text = script.table(
        {path: "0" * 40}, {"test/x.py": "needs a GPU"}, {path: (released, got)}
    )
    assert text.startswith(script.START) and text.endswith(script.END)
    assert f"| `{path}` | `000000000000` | 6 | 6 | 2 |" in text
    assert "| `test/x.py` | | not run: needs a GPU | | |" in text
    row = next(line for line in text.splitlines() if "::TestThing::test_fails" in line)
    assert row.startswith(
        "| `test_sample.py::TestThing::test_fails` | pass | fail | Assert"
    )
    unchanged = next(
        line for line in text.splitlines() if "::TestThing::test_passes" in line
    )
    assert unchanged.endswith("| pass | pass |  |")
