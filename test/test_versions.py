"""The SGLang version of a tree, read wherever the tree records it, and what each command does
with it: the tested releases (0.5.9, 0.5.10, 0.5.10.post1, 0.5.11 with its post-releases, local
labels included) go through (test_older_releases.py runs the older three); the real 0.5.8 and
0.5.12 releases (their wheels from PyPI, as unpacked package folders and as git checkouts tagged
``v0.5.8`` / ``v0.5.12``) are refused by name with nothing written; 0.5.12 is named as
carrying upstream's own version of the refactor; ``--allow-untested-version`` lets 0.5.8
through with a one-line warning; a tree with no version proceeds with a one-line note.

Only the files the rules read and the version files are unpacked from each wheel.
"""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import git, git_status, make_checkout, read_by_commands
from conftest import run_cli as run
from conftest import tree_digest as digest
from sglang_eagle_sizing.families import AFTER_REFACTOR, BEFORE_REFACTOR, family_of_structure
from sglang_eagle_sizing.tree import SglangTree, TreeError, TreeVersion
from sglang_eagle_sizing.wheel import cached_release_wheel

ALLOW = "--allow-untested-version"
TESTED = "only 0.5.9, 0.5.10, 0.5.10.post1, 0.5.11, 0.5.22 and 0.5.23 are tested"




@pytest.fixture(scope="session")
def releases(tmp_path_factory) -> dict[str, Path]:
    """``{version: folder holding sglang/}`` for 0.5.8, 0.5.11 and 0.5.12, each from its
    release wheel (pip-downloaded once into the test cache)."""
    root = tmp_path_factory.mktemp("releases")
    found = {}
    for version in ("0.5.8", "0.5.11", "0.5.12"):
        with zipfile.ZipFile(cached_release_wheel(version)) as wheel:
            names = [n for n in wheel.namelist() if read_by_commands(n)]
            wheel.extractall(root / version, names)
        found[version] = root / version
    return found


@pytest.fixture
def package(releases, tmp_path):
    def copy(version: str) -> Path:
        target = tmp_path / version / "sglang"
        shutil.copytree(releases[version] / "sglang", target)
        return target

    return copy


@pytest.fixture
def checkout(releases, tmp_path):
    def make(version: str, tag: str | None) -> Path:
        return make_checkout(releases[version] / "sglang", tmp_path / f"fork-{version}", tag)

    return make


def test_the_release_wheels_record_their_version_in_version_py(releases):
    for version in ("0.5.8", "0.5.11"):
        package = releases[version] / "sglang"
        tree = SglangTree.locate(package, allow_untested_version=True)
        assert tree.version == TreeVersion(version, str(package / "_version.py"))


@pytest.mark.parametrize("version", ["0.5.8", "0.5.12"])
@pytest.mark.parametrize("command", ["check", "diff", "apply", "revert", "pr"])
def test_another_release_is_refused_by_name_and_nothing_written(
    package, version, command
):
    tree = package(version)
    before = digest(tree.parent)
    code, out, err = run(command, str(tree))
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert f"SGLang {version} ({tree / '_version.py'})" in lines[0]
    if version == "0.5.12":
        assert "upstream's own version of this refactor" in lines[0]
        assert "eagle_info.py:" in lines[0]
    else:
        assert TESTED in lines[0] and ALLOW in lines[0]
    assert digest(tree.parent) == before


@pytest.mark.parametrize("version", ["0.5.8", "0.5.12"])
def test_another_release_checkout_is_refused_naming_its_git_tag(checkout, version):
    fork = checkout(version, f"v{version}")
    for command in ("check", "apply"):
        code, out, err = run(command, str(fork))
        assert code == 2 and out == ""
        assert f"SGLang {version} (git tag v{version})" in err, err
    assert git_status(fork) == []
    assert not (fork / ".git" / "sglang-eagle-sizing" / "backup").exists()


def test_the_override_lets_0_5_8_through_on_structure_with_a_warning(checkout):
    fork = checkout("0.5.8", "v0.5.8")
    warning = (
        f"warning: SGLang 0.5.8 (git tag v0.5.8): {TESTED}; proceeding on "
        f"structure ({ALLOW})"
    )
    code, out, err = run("check", ALLOW, str(fork))
    assert code == 1
    assert err.splitlines()[0] == warning
    assert err.splitlines()[-1] == f"to fix, run: sglang-eagle-sizing apply {ALLOW} {fork}"
    code, out, err = run("apply", ALLOW, str(fork))
    assert code == 0, err
    assert err.splitlines()[0] == warning and len(err.splitlines()) == 2
    # the summary on stderr, as check's
    assert err.splitlines()[-1].startswith(
        "applied to SGLang 0.5.8 (git tag v0.5.8) at "
    )
    # 0.5.8 has the 15 sizing sites; one of 0.5.11's supporting changes has no place there
    assert ": 15 sizing sites routed, 28 supporting changes" in err.splitlines()[-1]
    assert run("check", ALLOW, str(fork))[0] == 0
    assert run("revert", ALLOW, str(fork))[0] == 0
    assert git_status(fork) == []


def test_the_override_does_not_apply_upstreams_own_refactor(package):
    code, _, err = run("apply", ALLOW, str(package("0.5.12")))
    assert code == 2 and "upstream's own version of this refactor" in err


def test_a_checkout_without_tags_proceeds_with_a_note(checkout):
    fork = checkout("0.5.11", None)
    code, _, err = run("apply", "-q", str(fork))
    assert code == 0
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("note: no SGLang version found at "), lines
    assert "proceeding on structure" in lines[0]
    code, _, err = run("check", str(fork))
    assert code == 0
    assert err.splitlines()[-1].startswith("checked SGLang (version unknown) at ")


def test_a_checkout_reads_the_tag_not_a_generated_version_file(checkout):
    """setuptools_scm writes the *next* version into _version.py of a checkout past a tag."""
    fork = checkout("0.5.11", "v0.5.11")
    (fork / "python/sglang/_version.py").write_text("__version__ = version = '0.5.12.dev3'\n")
    tree = SglangTree.locate(fork)
    assert tree.version == TreeVersion("0.5.11", "git tag v0.5.11")
    git(fork, "commit", "-q", "--allow-empty", "-m", "merge upstream 0.5.12")
    git(fork, "tag", "v0.5.12")
    with pytest.raises(TreeError, match=r"SGLang 0\.5\.12 \(git tag v0\.5\.12\)"):
        SglangTree.locate(fork)


def test_installed_metadata_and_literal_version_are_read(package):
    tree = package("0.5.11")
    (tree / "_version.py").unlink()
    info = tree.parent / "sglang-0.5.8.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.8\n\n")
    with pytest.raises(TreeError, match=r"SGLang 0\.5\.8 \(.*METADATA\)"):
        SglangTree.locate(tree)
    shutil.rmtree(info)
    info = tree.parent / "sglang-0.5.11+eaglesizing1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Name: sglang\nVersion: 0.5.11+eaglesizing1\n\n")
    assert SglangTree.locate(tree).version.number == "0.5.11+eaglesizing1"
    shutil.rmtree(info)
    (tree / "version.py").write_text('__version__ = "0.5.11.post2"\n')
    assert SglangTree.locate(tree).version == TreeVersion(
        "0.5.11.post2", str(tree / "version.py")
    )


def test_a_tree_without_a_version_goes_to_its_family_by_its_files(package):
    """0.5.9-0.5.11 keep the v2 module upstream's refactor removed."""
    srt = package("0.5.11") / "srt"
    assert family_of_structure(srt) is BEFORE_REFACTOR
    (srt / "speculative" / "eagle_info_v2.py").unlink()
    assert family_of_structure(srt) is AFTER_REFACTOR


@pytest.mark.parametrize(
    "number, known",
    [
        ("0.5.11", True),
        ("0.5.11.post1", True),
        ("0.5.11+eaglesizing1", True),
        ("0.5.11.post2+fork.3", True),
        ("0.5.9", True),
        ("0.5.10", True),
        ("0.5.10.post1", True),
        ("0.5.10+fork.2", True),
        ("v0.5.9", True),
        ("0.5.8", False),
        ("0.5.9.post1", False),
        ("0.5.10.post2", False),
        ("0.5.12", False),
        ("0.5.23", True),
        ("0.5.23.post1", True),
        ("v0.5.23+fork.1", True),
        ("0.5.22", True),
        ("0.5.21", False),
        ("0.5.19", False),
        ("0.5.90", False),
        ("0.5.11.dev0", False),
        ("0.5.11rc1", False),
        ("0.5.110", False),
        ("0.5.1", False),
    ],
)
def test_which_versions_are_known(number, known):
    assert TreeVersion(number, "here").known is known
