"""check / diff / apply / revert on a real SGLang 0.5.11 tree, unpacked from the release wheel."""

from __future__ import annotations

import filecmp
import re

from conftest import tree_digest
from sglang_eagle_sizing.cli import main
from sglang_eagle_sizing.families.release_0_5_11.sites import AUX_FLAG_WORKERS, SITES


def test_check_on_pristine_lists_every_inventory_site(pristine, capsys, monkeypatch):
    # paths are printed from where the command runs (here the package's parent)
    monkeypatch.chdir(pristine.parent)
    assert main(["check", str(pristine)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("sglang/srt/") for line in lines), lines
    lines = [line.removeprefix("sglang/srt/") for line in lines]
    listed = {(line.split(":")[0], line.split()[1], line.split()[2]) for line in lines}
    for site in SITES:
        assert (site.file, site.scope, site.phase.value) in listed, site
    # each line is file:line  Class.method  label
    for line in lines:
        location, scope, label = line.split()
        assert location.split(":")[1].isdigit(), line
    # the two idle inputs of verify are both listed, at different lines
    verify = [l for l in lines if "EagleVerifyInput.verify" in l]
    assert len(verify) == 2
    # every worker without the one parser is listed
    for file, cls in AUX_FLAG_WORKERS:
        assert any(l.startswith(file) and f"{cls}.__init__  aux-flag" in l for l in lines), cls


def test_check_changes_nothing(tree):
    before = tree_digest(tree)
    assert main(["check", str(tree)]) == 1
    assert tree_digest(tree) == before


def test_apply_then_check_passes_and_second_apply_is_a_no_op(tree, capsys):
    assert main(["apply", str(tree)]) == 0
    # the summary goes to stderr (as check's), the routed sites to stdout
    assert "15 sizing sites routed" in capsys.readouterr().err
    assert main(["check", str(tree)]) == 0
    assert capsys.readouterr().out == ""
    after_first = tree_digest(tree)
    assert main(["apply", str(tree)]) == 0
    assert "nothing to do" in capsys.readouterr().err
    assert tree_digest(tree) == after_first


def test_revert_restores_original_bytes(tree, pristine):
    assert main(["apply", "-q", str(tree)]) == 0
    assert tree_digest(tree) != tree_digest(pristine)
    assert main(["revert", str(tree)]) == 0
    assert tree_digest(tree) == tree_digest(pristine)


def test_diff_is_what_apply_writes(tree, pristine, capsys, tmp_path):
    assert main(["diff", str(tree)]) == 0
    diff = capsys.readouterr().out
    # a package folder's diff names files from its parent: patch -p1 there applies it
    assert diff.startswith("diff --git a/sglang/srt/")
    assert "+class EagleDraftExtendInput(EagleDraftInput):" in diff
    # diff changed nothing
    assert tree_digest(tree) == tree_digest(pristine)
    # replaying the diff's + lines file by file gives the applied files
    main(["apply", "-q", str(tree)])
    for chunk in diff.split("--- a/")[1:]:
        name = chunk.split("\n", 1)[0].removeprefix("sglang/srt/")
        assert not filecmp.cmp(tree / "srt" / name, pristine / "srt" / name, shallow=False), name


def test_checkout_root_is_accepted(pristine_root, tmp_path, capsys):
    import shutil

    checkout = tmp_path / "fork"
    shutil.copytree(pristine_root / "sglang", checkout / "python" / "sglang")
    assert main(["apply", "-q", str(checkout)]) == 0
    assert main(["check", str(checkout)]) == 0


def test_not_sglang_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "something").mkdir()
    assert main(["check", str(tmp_path / "something")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an SGLang tree" in err[0]
    assert main(["apply", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_other_version_is_refused_and_nothing_written(tree, capsys):
    # release wheels record the version in _version.py (version.py only imports it)
    (tree / "_version.py").write_text('__version__ = version = "0.5.12"\n')
    before = tree_digest(tree)
    assert main(["apply", str(tree)]) == 2
    err = capsys.readouterr().err
    assert "SGLang 0.5.12" in err and "_version.py" in err
    assert tree_digest(tree) == before


def test_unknown_sizing_site_fails_check_and_apply_writes_nothing(tree, capsys):
    runner = tree / "srt" / "speculative" / "eagle_draft_cuda_graph_runner.py"
    text = runner.read_text()
    # a new hidden-width buffer in a method the site list does not know
    text += (
        "\n\ndef _new_buffer(self):\n"
        "    return torch.zeros((4, self.model_runner.model_config.hidden_size))\n"
    )
    runner.write_text(text)
    assert main(["check", str(tree)]) == 1
    out = capsys.readouterr().out
    assert "eagle_draft_cuda_graph_runner.py" in out and "_new_buffer  buffer" in out
    before = tree_digest(tree)
    assert main(["apply", str(tree)]) == 2
    err = capsys.readouterr().err
    assert "_new_buffer" in err and "nothing written" in err
    assert tree_digest(tree) == before


def test_revert_refuses_a_file_edited_since_apply(tree, capsys):
    assert main(["apply", "-q", str(tree)]) == 0
    worker = tree / "srt" / "speculative" / "eagle_worker.py"
    worker.write_text(worker.read_text() + "\n# local edit\n")
    before = tree_digest(tree)
    assert main(["revert", str(tree)]) == 2
    assert re.search(r"eagle_worker\.py(:\d+)?: edited since apply", capsys.readouterr().err)
    assert tree_digest(tree) == before
