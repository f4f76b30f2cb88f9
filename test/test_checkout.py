"""A fork maintainer's git checkout (``python/sglang`` from the 0.5.11 wheel, a ``test/registered/``
tree, tagged ``v0.5.11``): ``git status`` shows only what the patch changes and adds, diffs apply
with ``git apply`` and ``patch -p1`` at the root, printed paths open from where the command ran,
and the fork's test files are added, listed and removed.

The fork test files are stand-ins (``conftest.STAND_IN_TESTS``) the mechanism is pointed at;
an installed package folder gets none of them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import FORK_OWN_TEST, git, git_status
from conftest import run_cli as run
from sglang_eagle_sizing import patch, transaction
from sglang_eagle_sizing.families import BEFORE_REFACTOR
from sglang_eagle_sizing.families.release_0_5_11.sites import GET_CONFIG_FILES, SITE_FILES
from sglang_eagle_sizing.tree import SglangTree


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` but git's own."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def changed_keys() -> list[str]:
    # 0.5.11 reads configs in hf_transformers/config.py (GET_CONFIG_FILES[0])
    return [f"python/sglang/srt/{f}" for f in (*SITE_FILES, GET_CONFIG_FILES[0])]


def test_git_status_shows_only_the_patch_after_apply_and_nothing_after_revert(
    checkout, stand_in_tests, monkeypatch
):
    monkeypatch.chdir(checkout)
    code, out, err = run("apply", ".")
    assert code == 0, err
    expected = {f" M {key}" for key in changed_keys()}
    expected |= {f"?? {key}" for key in stand_in_tests}
    assert set(git_status(checkout)) == expected
    # the tool's state lives under the git directory
    git_dir = checkout / ".git" / "sglang-eagle-sizing"
    assert (git_dir / "backup" / "manifest.json").is_file()
    assert not [p for p in checkout.rglob(".eagle-sizing*")]
    for key, data in stand_in_tests.items():
        assert (checkout / key).read_bytes() == data
    code, out, err = run("revert", ".")
    assert code == 0, err
    assert git_status(checkout) == []
    # the folders apply created for the added files are gone, the fork's own are kept
    assert not (checkout / "test" / "registered" / "spec").exists()
    assert (checkout / FORK_OWN_TEST).is_file()
    assert not (git_dir / "backup").exists()
    # the summary goes to stderr, as check's does
    assert (out, err) == (
        "",
        "reverted SGLang 0.5.11 (git tag v0.5.11) at python/sglang: 16 files restored, "
        "2 fork test files removed\n",
    )


def test_diff_at_the_root_is_what_apply_writes_with_git_apply_and_patch(
    checkout, stand_in_tests, tmp_path
):
    code, diff, err = run("diff", str(checkout))
    assert code == 0, err
    assert diff.startswith("diff --git a/python/sglang/srt/")
    for key in stand_in_tests:
        assert f"--- /dev/null\n+++ b/{key}\n" in diff
    (tmp_path / "patch.diff").write_text(diff)
    with_git = tmp_path / "with-git"
    with_patch = tmp_path / "with-patch"
    for copy in (with_git, with_patch):
        shutil.copytree(checkout, copy, symlinks=True)
    git(with_git, "apply", str(tmp_path / "patch.diff"))
    subprocess.run(
        ["patch", "-p1", "--quiet", "-i", str(tmp_path / "patch.diff")],
        cwd=with_patch,
        check=True,
    )
    assert run("apply", "-q", str(checkout))[0] == 0
    applied = files(checkout)
    assert files(with_git) == applied
    assert files(with_patch) == applied
    assert set(git_status(with_git)) == set(git_status(checkout))


def test_check_lists_paths_from_where_it_runs_and_ends_with_the_fix(
    checkout, stand_in_tests, monkeypatch
):
    monkeypatch.chdir(checkout)
    code, out, err = run("check", ".")
    assert code == 1
    lines = out.splitlines()
    assert all(line.startswith(("python/sglang/srt/", "test/")) for line in lines), lines
    for key in stand_in_tests:
        assert f"{key}  fork-test  not added" in lines
    assert err.splitlines() == [
        (
            "checked SGLang 0.5.11 (git tag v0.5.11) at python/sglang: 15 sizing sites to "
            "route, 29 supporting changes to make, 2 fork test files to add"
        ),
        "to fix, run: sglang-eagle-sizing apply .",
    ]
    # from a subfolder, the paths are relative to it when under it, else absolute
    monkeypatch.chdir(checkout / "python")
    code, out_python, err = run("check", "..")
    assert code == 1
    assert out_python.splitlines()[0].startswith("sglang/srt/")
    assert err.splitlines()[-1] == "to fix, run: sglang-eagle-sizing apply .."
    monkeypatch.chdir(checkout / "test")
    code, out_test, _ = run("check", "../python/sglang")  # PATH inside the checkout
    assert code == 1
    first = out_test.splitlines()[0]
    assert first.startswith(str(checkout.resolve() / "python/sglang/srt/")), first
    assert "registered/unit/speculative/eagle_hidden_sizing/test_annotation.py  fork-test" in out_test


def test_check_on_a_checkout_asks_for_missing_test_files_only(
    checkout, stand_in_tests, monkeypatch
):
    monkeypatch.chdir(checkout)
    assert run("apply", "-q", ".")[0] == 0
    code, out, err = run("check", ".")
    assert (code, out) == (0, "")
    assert err == (
        "checked SGLang 0.5.11 (git tag v0.5.11) at python/sglang: every sizing site "
        "routed, 2 fork test files present\n"
    )
    cpu, gpu = sorted(stand_in_tests)[::-1]
    # the fork edits a test it owns: present is enough
    (checkout / cpu).write_text((checkout / cpu).read_text() + "# the fork's edit\n")
    assert run("check", ".")[0] == 0
    # a test file removed: work to do, and apply puts it back (and only it)
    (checkout / gpu).unlink()
    code, out, err = run("check", ".")
    assert code == 1 and out == f"{gpu}  fork-test  not added\n"
    assert "1 fork test file to add" in err
    code, out, err = run("apply", ".")
    assert code == 0, err
    assert f"added    {gpu}" in out.splitlines()
    assert (checkout / gpu).read_bytes() == stand_in_tests[gpu]
    assert "# the fork's edit" in (checkout / cpu).read_text()


def test_revert_keeps_a_file_the_user_put_in_a_folder_apply_created(
    checkout, stand_in_tests
):
    assert run("apply", "-q", str(checkout))[0] == 0
    mine = checkout / "test" / "registered" / "spec" / "eagle" / "test_mine.py"
    mine.write_text("# mine\n")
    assert run("revert", str(checkout))[0] == 0
    assert mine.read_text() == "# mine\n"
    assert git_status(checkout) == ["?? test/registered/spec/eagle/test_mine.py"]


def test_an_installed_package_gets_no_test_files(tree, stand_in_tests, tmp_path):
    code, out, _ = run("check", str(tree))
    assert code == 1 and "fork-test" not in out
    code, diff, _ = run("diff", str(tree))
    assert code == 0 and "/dev/null" not in diff
    before = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()}
    assert run("apply", "-q", str(tree))[0] == 0
    assert run("check", str(tree))[0] == 0
    after = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()}
    new = {p for p in after - before if not p.parts[1].startswith(".eagle-sizing")}
    assert new == set()
    assert (tree / transaction.BACKUP_DIR / "manifest.json").is_file()


def test_the_pr_diff_carries_the_test_files(checkout, stand_in_tests):
    """The CPU test always, the GPU end-to-end test only with --with-gpu-test (it has never
    run); the fork's own CPU test file is carried whole, not sliced by concern."""
    code, text, err = run("pr", "--diff", str(checkout))
    assert code == 0, err
    cpu, gpu = sorted(stand_in_tests, key=lambda key: "spec/eagle" in key)
    assert f"+++ b/{cpu}\n" in text and f"+++ b/{gpu}\n" not in text
    assert "+class TestStandIn(unittest.TestCase):\n" in text
    code, text, err = run("pr", "--diff", "--with-gpu-test", str(checkout))
    assert code == 0, err
    for key in stand_in_tests:
        assert f"+++ b/{key}\n" in text


def test_debris_of_an_interrupted_run_is_removed_by_the_next_one(
    checkout, stand_in_tests
):
    tree = SglangTree.locate(checkout)
    # what a revert killed while removing the backup folder leaves: no manifest, no journal
    leftover = tree.backup_dir / "originals" / "python" / "sglang" / "srt"
    leftover.mkdir(parents=True)
    (leftover / "x.py").write_text("half removed\n")
    assert run("revert", str(checkout))[0] == 2  # nothing to revert...
    assert not tree.backup_dir.exists()  # ...and the debris is gone
    leftover.mkdir(parents=True)
    assert run("apply", "-q", str(checkout))[0] == 0
    assert not (tree.backup_dir / "originals" / "python" / "sglang" / "srt" / "x.py").exists()
    assert run("revert", str(checkout))[0] == 0
    assert git_status(checkout) == [] and not tree.backup_dir.exists()


def test_a_linked_worktree_keeps_its_state_in_its_own_git_directory(
    checkout, stand_in_tests, tmp_path
):
    worktree = tmp_path / "second"
    git(checkout, "worktree", "add", "-q", str(worktree))
    assert run("apply", "-q", str(worktree))[0] == 0
    own = checkout / ".git" / "worktrees" / "second" / "sglang-eagle-sizing" / "backup"
    assert (own / "manifest.json").is_file()
    assert not (checkout / ".git" / "sglang-eagle-sizing").exists()
    assert len(git_status(worktree)) == len(changed_keys()) + len(stand_in_tests)
    assert git_status(checkout) == []
    assert run("revert", str(worktree))[0] == 0
    assert git_status(worktree) == []


def test_a_checkout_without_git_keeps_its_state_in_the_package(
    pristine, stand_in_tests, tmp_path
):
    plain = tmp_path / "plain"
    shutil.copytree(pristine, plain / "python" / "sglang")
    (plain / "test").mkdir()
    assert run("apply", "-q", str(plain))[0] == 0
    assert (plain / "python/sglang" / transaction.BACKUP_DIR / "manifest.json").is_file()
    for key in stand_in_tests:
        assert (plain / key).is_file()
    assert run("revert", str(plain))[0] == 0
    assert sorted(p.name for p in (plain / "test").iterdir()) == []


def test_inserted_test_files_reads_only_python_files(stand_in_tests):
    assert patch.inserted_test_files(BEFORE_REFACTOR) == stand_in_tests


def test_the_package_ships_its_inserted_tests_folder():
    """The folder exists in the package (a README explains it) and pyproject's package data
    covers every file of it, in every family."""
    import tomllib
    from fnmatch import fnmatch

    from conftest import REPO
    from sglang_eagle_sizing import families

    assert (BEFORE_REFACTOR.inserted_tests / "README.md").is_file()
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["sglang_eagle_sizing"]
    package = Path(families.__file__).resolve().parents[1]
    for family in families.FAMILIES:
        files = [p for p in family.inserted_tests.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        assert files, family.name
        for path in files:
            name = path.relative_to(package).as_posix()
            assert any(fnmatch(name, pattern) for pattern in patterns), name


def test_the_checkout_is_tagged_like_upstream(checkout_source):
    assert git(checkout_source, "describe", "--tags").strip() == "v0.5.11"
    assert git_status(checkout_source) == []
    assert not (checkout_source / "python/sglang/_version.py").exists()


def test_diffs_of_files_without_a_final_newline_or_with_a_form_feed_apply(tmp_path):
    """The diff's lines are git's (split at newlines only), and a last line without newline
    is marked, so ``git apply`` reproduces the bytes exactly."""
    from sglang_eagle_sizing.engine import unified_diff

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    old, new = "one\ntwo", "one\nthree\x0cfour\ntwo"
    (repo / "a.py").write_text(old)
    diff = unified_diff(old, new, "a/a.py", "b/a.py")
    diff += unified_diff("", "x\ny", "/dev/null", "b/sub/new.py")
    (tmp_path / "p.diff").write_text(diff)
    git(repo, "apply", str(tmp_path / "p.diff"))
    assert (repo / "a.py").read_bytes() == new.encode()
    assert (repo / "sub" / "new.py").read_bytes() == b"x\ny"


def test_an_empty_new_file_is_created_by_git_apply(tmp_path):
    """An empty file (the CPU test folder's ``__init__.py``) has no hunk: the diff's git
    header still makes ``git apply`` create it."""
    from sglang_eagle_sizing.engine import git_header, unified_diff

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    key = "test/pkg/__init__.py"
    (tmp_path / "p.diff").write_text(
        git_header(key, True) + unified_diff("", "", "/dev/null", "b/" + key)
    )
    git(repo, "apply", str(tmp_path / "p.diff"))
    assert (repo / key).read_bytes() == b""


def test_check_without_path_in_a_checkout_says_it_read_the_installed_sglang(
    checkout, monkeypatch
):
    monkeypatch.chdir(checkout)
    _, _, err = run("check")
    assert err.splitlines()[0].startswith("note: no PATH: working on the installed sglang (")
    assert err.splitlines()[0].endswith("not on python/sglang; pass . for this checkout")
    assert " at " in err.splitlines()[-2] or " at " in err.splitlines()[-1]
