"""Every message names a file one way, from where the command runs (errors raised while a rule
rewrites included), a refusal points to help the fork maintainer has: the tool's own
``--help``, never a document of this repository; and each message says what is true of the
tree in front of it, of either release family (0.5.23 has no sizing site of ours)."""

from __future__ import annotations

import contextlib
import io
import re
import shutil

import pytest
from conftest import make_checkout, run_cli
from sglang_eagle_sizing.cli import REFUSAL_HELP, REFUSALS
from sglang_eagle_sizing.cli import main as cli_main
from sglang_eagle_sizing.families import FAMILIES

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


def help_of(*argv: str) -> str:
    """``sglang-eagle-sizing ARGV --help``, its words on one line."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        cli_main([*argv, "--help"])
    assert stop.value.code == 0
    return " ".join(out.getvalue().split())


def test_check_and_diff_help_point_to_applys_refusals_without_repeating_them():
    refusals = " ".join(REFUSALS.split())
    for command in ("check", "diff"):
        text = help_of(command)
        assert refusals not in text, command
        assert text.endswith("sglang-eagle-sizing apply --help."), (command, text[-200:])
    assert refusals in help_of("apply")


def test_report_help_promises_what_both_families_report():
    text = help_of("report")
    assert "bytes" not in text.replace("on 0.5.9-0.5.11, bytes", ""), text


def test_the_help_names_both_families():
    """The top-level description and the refusal help fit a tree of either family."""
    described = help_of().split("positional arguments")[0]
    for family in FAMILIES:
        assert family.known_version in described, family.name
        assert family.known_version in " ".join(REFUSALS.split()), family.name


def test_check_and_apply_on_a_patched_0_5_23_checkout_name_no_sizing_site(
    release_0_5_23, tmp_path
):
    fork = make_checkout(release_0_5_23, tmp_path / "fork", "v0.5.23")
    assert run_cli("apply", "-q", str(fork))[0] == 0
    code, out, err = run_cli("check", str(fork))
    assert (code, out) == (0, ""), err
    assert "every change made" in err and "sizing site" not in err, err
    code, out, err = run_cli("apply", str(fork))
    assert (code, out) == (0, ""), err
    assert err.startswith("nothing to do:") and "sizing site" not in err, err


def test_check_on_a_patched_0_5_11_tree_says_every_sizing_site_is_routed(patched_root):
    code, out, err = run_cli("check", str(patched_root / "sglang"))
    assert (code, out) == (0, ""), err
    assert "every sizing site routed" in err, err


def _stem(architecture: str) -> str:
    """``Qwen3MoeForCausalLM`` -> ``qwen3moe``, as ``Qwen3-MoE`` reads without its dash."""
    return re.sub(r"For(CausalLM|ConditionalGeneration)$", "", architecture).lower()


def test_smoke_pair_help_names_every_target_class_pair_serves():
    from sglang_eagle_sizing.smoke.pair import MOE_DENSE, OWN_CLASS, TARGETS

    words = help_of("smoke").split("--pair DIR")[-1].split("--no-baseline")[0]
    plain = words.lower().replace("-", "")
    for architecture in (*TARGETS, *OWN_CLASS, *MOE_DENSE):
        assert _stem(architecture) in plain, (architecture, words)


def test_revert_without_a_backup_on_0_5_23_tells_a_patched_checkout_from_a_pristine_one(
    release_0_5_23, tmp_path
):
    """The modules the patch adds mark a patched 0.5.23 tree: without the backup, revert
    points to git there, and says the tree is not patched where they are absent."""
    fork = make_checkout(release_0_5_23, tmp_path / "fork", "v0.5.23")
    code, out, err = run_cli("revert", str(fork))
    assert (code, out) == (2, "") and "(the tree is not patched)" in err, err
    assert run_cli("apply", "-q", str(fork))[0] == 0
    shutil.rmtree(fork / ".git" / "sglang-eagle-sizing")
    code, out, err = run_cli("revert", str(fork))
    assert (code, out) == (2, "")
    assert "git revert the commit that applied it" in err and len(err.splitlines()) == 1, err
