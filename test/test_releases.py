"""Every release of the 0.5.23 family other than 0.5.23, as a fork has it (its PyPI wheel as a
git checkout tagged ``v<version>``): ``check`` plans each concern the release has and names
in a ``note:`` line each it does not, ``apply`` writes it, a second ``check`` finds every change
made, and ``revert`` leaves the checkout as it was. 0.5.22's fork tests run as its fork runs
them (0.5.22 pins 0.5.23's torch and transformers). scripts/releases_table.py runs every
release's fork tests for docs/releases.md, which this holds to the family's releases."""

from __future__ import annotations

import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import git_status, make_checkout, run_cli
from sglang_eagle_sizing.families import AFTER_REFACTOR
from sglang_eagle_sizing.families.release_0_5_23 import sites
from sglang_eagle_sizing.wheel import cached_release_wheel

REPO = Path(__file__).resolve().parents[1]
#: the releases before 0.5.23 it takes: tested (0.5.22), or on structure (0.5.16-0.5.21)
OLDER = ["0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22"]
ABSENT = "no class captures"
NO_FINAL = "models/minimax_m3.py: MiniMaxM3Model.forward does not capture"
FLAGS_UNSET = "models/minimax_m3.py: MiniMaxM3Model.forward captures by per-layer"
NO_RETURN_AUX = "test/registered/unit/speculative/test_eagle3_draft_check.py: without"
#: what each release does not have, by the start of its note line
NOTES = {
    "0.5.16": (f"models/glm5_next.py: {ABSENT}", f"models/minimax_m3_vl.py: {ABSENT}", f"models/qwen3_5_text.py: {ABSENT}", "models/gpt_oss.py: GptOssModel.forward does not capture", FLAGS_UNSET, "models/gemma3_causal.py: Gemma-3's decoder layer hands on the whole", NO_RETURN_AUX),
    "0.5.17": (f"models/glm5_next.py: {ABSENT}", f"models/minimax_m3_vl.py: {ABSENT}", f"models/qwen3_5_text.py: {ABSENT}", FLAGS_UNSET, NO_RETURN_AUX),
    "0.5.18": (f"models/glm5_next.py: {ABSENT}", f"models/qwen3_5_text.py: {ABSENT}", NO_FINAL, NO_RETURN_AUX),
    "0.5.19": (f"models/glm5_next.py: {ABSENT}", f"models/qwen3_5_text.py: {ABSENT}", NO_FINAL, NO_RETURN_AUX),
    "0.5.20": ("models/qwen3_5_text.py: no class captures", "models/minimax_m3.py: MiniMaxM3Model.forward does not capture", "test/registered/unit/speculative/test_eagle3_draft_check.py: without"),
    "0.5.21": ("models/qwen3_5_text.py: no class captures", "models/minimax_m3.py: MiniMaxM3Model.forward does not capture", "test/registered/unit/speculative/test_eagle3_draft_check.py: without"),
    "0.5.22": ("models/minimax_m3.py: MiniMaxM3Model.forward does not capture", "test/registered/unit/speculative/test_eagle3_draft_check.py: without"),
}


def _flag(version: str) -> tuple[str, ...]:
    return () if version in AFTER_REFACTOR.tested_versions else ("--allow-untested-version",)


@pytest.fixture(scope="module", params=OLDER)
def fork(request, tmp_path_factory) -> tuple[str, Path]:
    version = request.param
    folder = tmp_path_factory.mktemp(f"release-{version}")
    with zipfile.ZipFile(cached_release_wheel(version)) as wheel:
        wheel.extractall(folder, [n for n in wheel.namelist() if n.startswith("sglang/")])
    return version, make_checkout(folder / "sglang", folder / "fork", f"v{version}")


def test_apply_names_what_each_release_lacks_then_check_finds_it_all_and_revert_undoes_it(fork):
    """``apply`` (its ``note:`` lines are ``check``'s: both print the release's notes), a
    second ``check`` without the cache, ``revert``."""
    version, checkout = fork
    code, out, err = run_cli("apply", *_flag(version), str(checkout))
    assert code == 0, err
    assert f"applied to SGLang {version}" in err
    notes = [line.removeprefix("note: ") for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == len(NOTES[version])
    for start in NOTES[version]:
        assert len([n for n in notes if n.startswith(start)]) == 1, (start, notes)
    made = {line.split()[-1] for line in out.splitlines() if line.startswith("support ")}
    # every concern of the family but those the notes name has a change made
    assert {"draft-check", "draft-dtype", "capture-contract", "speculators-config"} <= made
    code, _, err = run_cli("check", "--no-cache", *_flag(version), str(checkout))
    # 0.5.16's Gemma-3 has nothing to fix: its test is not added
    files = 12 if version == "0.5.16" else 13
    assert code == 0 and f"every change made, {files} fork test files present" in err, err
    code, _, err = run_cli("revert", *_flag(version), str(checkout))
    assert code == 0, err
    assert git_status(checkout) == []


def test_diff_says_what_the_release_lacks_as_check_does(tmp_path):
    """A fork reviewing the change with ``diff`` reads the same ``note:`` lines: the diff on
    stdout, the notes on stderr."""
    folder = tmp_path / "release"
    with zipfile.ZipFile(cached_release_wheel("0.5.22")) as wheel:
        wheel.extractall(folder, [n for n in wheel.namelist() if n.startswith("sglang/")])
    checkout = make_checkout(folder / "sglang", tmp_path / "fork", "v0.5.22")
    code, out, err = run_cli("diff", str(checkout))
    assert code == 0 and out.startswith("diff --git "), err
    notes = [line for line in err.splitlines() if line.startswith("note: ")]
    assert len(notes) == len(NOTES["0.5.22"])
    assert all(any(n.startswith("note: " + start) for n in notes) for start in NOTES["0.5.22"])


def test_the_fork_tests_pass_on_0_5_22(tmp_path):
    """0.5.22 pins torch 2.14.1 and transformers 5.19.0, 0.5.23's environment's."""
    folder = tmp_path / "release"
    with zipfile.ZipFile(cached_release_wheel("0.5.22")) as wheel:
        wheel.extractall(folder, [n for n in wheel.namelist() if n.startswith("sglang/")])
    checkout = make_checkout(folder / "sglang", tmp_path / "fork", "v0.5.22")
    code, _, err = run_cli("apply", "-q", str(checkout))
    assert code == 0, err
    python = REPO / ".venv-0.5.23" / "bin" / "python"
    tests = [checkout / f for f in sites.TEST_CONCERNS]  # the files the patch adds
    assert all(test.is_file() for test in tests) and len(tests) == 13
    failed = {}
    for test in tests:
        result = subprocess.run(
            [str(python), str(test)], cwd=checkout, env={"PYTHONPATH": "python", "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=900,
        )
        if result.returncode != 0 or not re.search(r"^Ran [1-9]", result.stderr, re.M):
            failed[test.name] = result.stderr[-1500:]
    assert failed == {}


def test_the_releases_table_has_every_release():
    doc = (REPO / "docs" / "releases.md").read_text()
    rows = re.findall(r"^\| (0\.5\.\d+) \| (yes|on structure) \|(.*)$", doc, re.M)
    assert sorted(v for v, _, _ in rows) == sorted([*OLDER, AFTER_REFACTOR.known_version])
    for version, tested, rest in rows:
        assert "not clean" not in rest, version
        # a release the family is tested on passes every fork test file
        assert (version in AFTER_REFACTOR.tested_versions) is (tested == "yes"), version
        if tested == "yes":
            assert "FAILED" not in rest, version
