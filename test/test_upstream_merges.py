"""An upstream merge tried as a fork would, on both families (``test/support/upstream_merges.py``
has the commits): on a checkout tagged ``v<release>`` with the patch committed, a merge of an
upstream commit that moves code the patch touched (conflicts resolved upstream's way). The
pre-commit hook takes the merge (its ``files`` match); then either it passes on a tree whose
piece of the patch is whole, or it fails, and ``apply`` (the command it prints) gives a tree
``check`` accepts and whose piece is whole, or refuses naming the file and line, writing
nothing. Never a tree the hook passes with the patch half there."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import git, git_status, make_checkout, run_cli, tree_digest

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
from upstream_merges import MERGES, merge_upstream, run_hook  # noqa: E402

FIX = "to fix, run: sglang-eagle-sizing apply ."


def _patched(package: Path, folder: Path, release: str) -> Path:
    fork = make_checkout(package, folder / "fork", f"v{release}")
    code, _, err = run_cli("apply", "-q", str(fork))
    assert code == 0, err
    git(fork, "add", "-A")
    git(fork, "commit", "-q", "-m", "apply the EAGLE sizing patch")
    assert run_cli("check", str(fork))[0] == 0
    return fork


@pytest.fixture(scope="module")
def patched_0_5_23(release_0_5_23, tmp_path_factory) -> Path:
    return _patched(release_0_5_23, tmp_path_factory.mktemp("merges-0.5.23"), "0.5.23")


@pytest.fixture(scope="module")
def patched_0_5_11(pristine, tmp_path_factory) -> Path:
    return _patched(pristine, tmp_path_factory.mktemp("merges-0.5.11"), "0.5.11")


@pytest.fixture
def fork_of(request, tmp_path, monkeypatch):
    def copy(release: str) -> Path:
        source = request.getfixturevalue("patched_" + release.replace(".", "_"))
        fork = tmp_path / "fork"
        shutil.copytree(source, fork, symlinks=True)
        monkeypatch.chdir(fork)
        return fork

    return copy


def _names(text: str, file: str) -> bool:
    return f"{file}:" in text


@pytest.mark.parametrize("merge", MERGES, ids=lambda m: f"{m.release}: {m.name}")
def test_an_upstream_merge_is_refused_by_the_hook_then_fixed_or_refused_by_apply(merge, fork_of):
    fork = fork_of(merge.release)
    merge_upstream(fork, merge)
    assert git_status(fork) == []

    guard = run_hook(fork)
    assert guard is not None, "the hook skipped a merge that moved code the patch touched"
    if guard.returncode == 0:  # the merge kept the patch's piece whole
        assert merge.whole(fork), "the hook passed a tree with the patch half there"
        return
    if guard.returncode == 1:  # the work listed, and the command, or why apply will refuse
        last = guard.stderr.splitlines()[-1]
        assert last == FIX or last.startswith("apply refuses "), guard.stderr
        assert _names(guard.stdout, merge.file), guard.stdout
    else:
        assert guard.returncode == 2 and guard.stderr.startswith(f"error: {merge.file}:"), guard.stderr

    state = fork / ".git" / "sglang-eagle-sizing"  # the committed apply's backup
    before = tree_digest(state)
    code, out, err = run_cli("apply", ".")
    if code == 0:
        assert guard.stderr.splitlines()[-1] == FIX
        assert run_cli("check", ".")[0] == 0
        assert merge.whole(fork)
        assert [line[3:] for line in git_status(fork)] == [merge.file]
    else:  # refused: the file and line named, nothing written
        assert (code, out) == (2, ""), err
        assert err.startswith("error: ") and _names(err, merge.file), err
        # the line of what it refuses; line 1 only for a function that is not there at all
        assert f"{merge.file}:1: " not in err or ": not found (" in err, err
        assert git_status(fork) == [] and tree_digest(state) == before


def test_a_commit_that_touches_nothing_of_it_skips_the_hook(fork_of):
    fork = fork_of("0.5.23")
    (fork / "README.md").write_text("the fork's own notes\n")
    (fork / "python/sglang/srt/layers/fork_notes.py").write_text("# the fork's own\n")
    git(fork, "add", "-A")
    git(fork, "commit", "-q", "-m", "notes")
    assert run_hook(fork) is None
