"""The pre-commit hook, run as pre-commit runs it: its ``entry`` from .pre-commit-hooks.yaml,
with no file names, at the root of a fork's git checkout of either family. It fails on the
release (0.5.11, 0.5.23), ending with the command that fixes it, and passes once the patch is
applied; a commit touching any file a family's rules read triggers it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, STAND_IN_TESTS, make_checkout
from sglang_eagle_sizing.cli import main as cli_main
from sglang_eagle_sizing.families import FAMILIES

HOOK_ID = "sglang-eagle-sizing-check"


@pytest.fixture(scope="module")
def hook() -> dict:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    found = [h for h in hooks if h["id"] == HOOK_ID]
    assert len(found) == 1
    return found[0]


def test_the_hook_is_declared_as_the_brief_says(hook):
    assert hook["language"] == "python"
    assert hook["pass_filenames"] is False
    # every file a family's rules read triggers it (0.5.23's model files included)
    for family in FAMILIES:
        for file in family.site_files:
            assert re.search(hook["files"], "python/sglang/srt/" + file), (family.name, file)
    # and so does removing a fork test file apply added
    for key in STAND_IN_TESTS:
        assert re.search(hook["files"], key), key
    assert not re.search(hook["files"], "python/sglang/srt/layers/linear.py")
    assert "hidden_size_for" not in hook["name"]  # named for no one family
    assert hook["entry"].split()[:2] == ["sglang-eagle-sizing", "check"]
    assert hook.get("name")


def _run_hook(hook: dict, checkout: Path) -> subprocess.CompletedProcess:
    """Like pre-commit: the entry split shell-style, the hook's environment first on PATH
    (here .venv's bin, which holds the console script), cwd the checkout root."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), env.get("PATH", "")]
    )
    return subprocess.run(  # noqa: PLW1510 (the caller checks the exit code)
        shlex.split(hook["entry"]) + hook.get("args", []),
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
    )


def test_the_hook_fails_on_the_release_and_passes_once_patched(hook, checkout):
    before = _run_hook(hook, checkout)
    assert before.returncode == 1, before.stdout + before.stderr
    # it names the unrouted sites, from the checkout root
    assert "python/sglang/srt/speculative/eagle_worker.py:" in before.stdout
    # and ends with the tree it checked and the command that fixes it
    assert before.stderr.splitlines()[-2].startswith(
        "checked SGLang 0.5.11 (git tag v0.5.11) at python/sglang: 15 sizing sites to route"
    )
    assert before.stderr.splitlines()[-1] == "to fix, run: sglang-eagle-sizing apply ."

    assert cli_main(["apply", "--quiet", str(checkout)]) == 0
    after = _run_hook(hook, checkout)
    assert after.returncode == 0, after.stdout + after.stderr
    assert after.stdout == ""


def test_the_hook_fails_on_0_5_23_and_passes_once_patched(hook, release_0_5_23, tmp_path):
    checkout = make_checkout(release_0_5_23, tmp_path / "fork", "v0.5.23")
    before = _run_hook(hook, checkout)
    assert before.returncode == 1, before.stdout + before.stderr
    assert "python/sglang/srt/models/gpt_oss.py:" in before.stdout
    assert before.stderr.splitlines()[-2].startswith(
        "checked SGLang 0.5.23 (git tag v0.5.23) at python/sglang: "
    )
    assert before.stderr.splitlines()[-1] == "to fix, run: sglang-eagle-sizing apply ."

    assert cli_main(["apply", "--quiet", str(checkout)]) == 0
    after = _run_hook(hook, checkout)
    assert after.returncode == 0, after.stdout + after.stderr
    assert after.stdout == ""
