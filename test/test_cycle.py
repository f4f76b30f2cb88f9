"""The fork maintainer's cycle on a git checkout, as the tool prints it: apply, commit, an
upstream merge puts a site back, the hook (``sglang-eagle-sizing check .``, the entry of
.pre-commit-hooks.yaml) fails and prints the command that fixes it, that command works, the
hook passes; and ``revert`` once the patch is committed (README, "After a commit")."""

from __future__ import annotations

import shlex

from conftest import git, git_status, run_cli

WORKER = "python/sglang/srt/speculative/eagle_worker.py"
ROUTED = "hidden_size=EagleDraftInput.hidden_size_for(self),"
#: what an upstream merge brings back into _draft_preprocess_idle: 0.5.11's width
RELEASE = "hidden_size=self.model_config.spec_hidden_size,"


def _state_dir(checkout):
    return checkout / ".git" / "sglang-eagle-sizing"


def test_apply_commit_merge_hook_fix_hook(checkout, stand_in_tests, monkeypatch):
    monkeypatch.chdir(checkout)
    assert run_cli("apply", "-q", ".")[0] == 0
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "route the EAGLE hidden-state sizing")

    # an upstream merge (here: its result, committed) puts one site back
    worker = checkout / WORKER
    text = worker.read_text()
    assert text.count(ROUTED) == 1
    worker.write_text(text.replace(ROUTED, RELEASE))
    git(checkout, "commit", "-q", "-am", "merge upstream")

    code, out, err = run_cli("check", ".")  # the hook's entry
    assert code == 1
    assert out.splitlines() == [f"{WORKER}:{_line_of(worker, RELEASE)}  EAGLEWorker._draft_preprocess_idle  decode"]
    fix = err.splitlines()[-1]
    assert fix == "to fix, run: sglang-eagle-sizing apply ."

    # the printed command, as printed
    words = shlex.split(fix.removeprefix("to fix, run: "))
    assert words[0] == "sglang-eagle-sizing"
    code, out, err = run_cli(*words[1:])
    assert code == 0, err
    assert "the last apply is committed" in err
    assert out.splitlines()[0].startswith(f"routed   {WORKER}:")
    assert ROUTED in worker.read_text()
    assert git_status(checkout) == [f" M {WORKER}"]
    assert run_cli("check", ".")[0] == 0  # the hook passes
    git(checkout, "commit", "-q", "-am", "route the merged site")

    # later work of the fork's own in that file, committed: revert would undo it, so it refuses
    worker.write_text(worker.read_text() + "\n# the fork's own later work\n")
    git(checkout, "commit", "-q", "-am", "fork work")
    before = worker.read_bytes()
    code, out, err = run_cli("revert", ".")
    assert code == 2
    assert err.startswith(f"error: {WORKER}: the apply is committed and this file changed since")
    assert "git revert" in err
    assert worker.read_bytes() == before and git_status(checkout) == []


def _line_of(path, fragment):
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if fragment in line) - 2


def test_revert_right_after_the_commit_then_a_refused_apply_leave_no_state_folder(
    checkout, stand_in_tests, monkeypatch
):
    monkeypatch.chdir(checkout)
    head = git(checkout, "rev-parse", "HEAD").strip()
    assert run_cli("apply", "-q", ".")[0] == 0
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "route")
    code, out, err = run_cli("revert", ".")
    assert code == 0, err
    # nothing changed since the apply: revert takes the patch out (the change to commit)
    assert git(checkout, "diff", "--stat", head) == ""
    assert not _state_dir(checkout).exists()
    # a sizing site the rules do not know: apply refuses, nothing written, no folder left
    git(checkout, "commit", "-q", "-am", "unroute")
    worker = checkout / WORKER
    worker.write_text(
        worker.read_text()
        + "\n\ndef fork_idle(d):\n    return torch.zeros((1, d.hidden_size), dtype=d.dtype)\n"
    )
    code, out, err = run_cli("apply", ".")
    assert code == 2 and out == ""
    first, unknown = err.splitlines()
    assert first == (
        "error: sizing sites the rules cannot handle; nothing written (sglang-eagle-sizing "
        "apply --help says what to do):"
    )
    line = worker.read_text().splitlines().index("    return torch.zeros((1, d.hidden_size), dtype=d.dtype)") + 1
    assert unknown == f"{WORKER}:{line}  fork_idle  buffer  unknown buffer"
    assert not _state_dir(checkout).exists()
