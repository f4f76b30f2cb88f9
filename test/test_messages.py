"""Every message names a file one way, from where the command runs (errors raised while a rule
rewrites included), and a refusal points to help the fork maintainer has: the tool's own
``--help``, never a document of this repository."""

from __future__ import annotations

import contextlib
import io

import pytest
from conftest import run_cli
from sglang_eagle_sizing.cli import REFUSAL_HELP, REFUSALS
from sglang_eagle_sizing.cli import main as cli_main

WORKER = "sglang/srt/speculative/eagle_worker.py"
IDLE = "            batch.spec_info = EagleDraftInput.create_idle_input(\n"


def test_a_rewrite_error_names_the_file_from_where_apply_runs(tree, monkeypatch):
    worker = tree / "srt/speculative/eagle_worker.py"
    lines = worker.read_text().splitlines(keepends=True)
    # a statement of the fork's right after the v1 extend idle input, inside its `if`
    start = max(i for i, line in enumerate(lines) if line == IDLE)
    end = next(i for i in range(start, len(lines)) if lines[i] == "            )\n")
    lines.insert(end + 1, "            batch.spec_info.fork_flag = True\n")
    worker.write_text("".join(lines))
    before = worker.read_bytes()
    monkeypatch.chdir(tree.parent)
    code, out, err = run_cli("apply", "sglang")
    assert code == 2 and out == ""
    assert err.startswith(
        f"error: {WORKER}:{end + 2}: EAGLEWorker.forward_draft_extend_after_decode: a statement "
        "follows the idle input inside the `if`"
    ), err
    assert err.rstrip("\n").endswith(f"(nothing written; {REFUSAL_HELP})")
    assert "docs/" not in err and worker.read_bytes() == before


def test_the_help_a_refusal_points_to_says_what_to_do():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        cli_main(["apply", "--help"])
    assert stop.value.code == 0
    help_text = " ".join(out.getvalue().split())
    assert " ".join(REFUSALS.split()) in help_text
    assert REFUSAL_HELP.startswith("sglang-eagle-sizing apply --help")
