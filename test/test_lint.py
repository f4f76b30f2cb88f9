"""The patched files read like SGLang's own: black-clean, and no new undefined or redefined names."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import black
from sglang_eagle_sizing.families.release_0_5_11 import inserted
from sglang_eagle_sizing.patch import check_tree
from sglang_eagle_sizing.tree import SglangTree


def _changed_files(pristine, patched_root):
    patched = patched_root / "sglang"
    files = SglangTree.locate(pristine).files()
    return [f for f in files if (pristine / "srt" / f).read_bytes() != (patched / "srt" / f).read_bytes()]


def _ruff(folder, files):
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821,F811",
         "--output-format", "json", *[str(folder / "srt" / f) for f in files]],
        capture_output=True, text=True,
    )
    assert result.returncode in (0, 1), result.stderr
    return Counter(
        (d["filename"].split("/srt/")[1], d["code"], d["message"]) for d in json.loads(result.stdout)
    )


def test_ruff_finds_nothing_new_in_the_patched_files(pristine, patched_root):
    files = _changed_files(pristine, patched_root)
    assert len(files) == 16
    before = _ruff(pristine, files)
    after = _ruff(patched_root / "sglang", files)
    assert after - before == Counter()


def test_patched_files_are_black_clean(pristine, patched_root):
    files = _changed_files(pristine, patched_root)
    for f in files:
        text = (patched_root / "sglang" / "srt" / f).read_text()
        assert black.format_str(text, mode=black.Mode()) == text, f


def test_inserted_code_is_black_formatted():
    pieces = dict(inserted.HELPERS_BY_CONCERN)
    for name in ("PARSER_HELPERS", "HELPERS", "DECODE_CLASSMETHODS", "EXTEND_CLASS"):
        pieces[name] = getattr(inserted, name)
    for name, source in pieces.items():
        source = source.lstrip("\n")
        assert black.format_str(source, mode=black.Mode()) == source, name


def test_inserted_code_of_0_5_23_is_black_formatted():
    """What the 0.5.23 patch inserts as whole functions or modules, and the speculators
    converter both families insert: as black writes it (SGLang's pre-commit runs black)."""
    from sglang_eagle_sizing.families.release_0_5_23 import inserted as after_refactor

    pieces = {
        "EAGLE3_DRAFT_CONFIG + EAGLE3_DRAFT_CHECK": after_refactor.EAGLE3_DRAFT_CONFIG
        + after_refactor.EAGLE3_DRAFT_CHECK,
        "SPECULATORS_LOADER_FUNCTION": after_refactor.SPECULATORS_LOADER_FUNCTION,
        "DRAFT_DTYPE_FUNCTION": after_refactor.DRAFT_DTYPE_FUNCTION,
        "SPECULATORS_CONFIG_FUNCTIONS": inserted.SPECULATORS_CONFIG_FUNCTIONS,
    }
    for name, source in pieces.items():
        source = source.lstrip("\n")
        assert black.format_str(source, mode=black.Mode()) == source, name


def test_patched_tree_has_nothing_left_to_route(patched_root):
    report = check_tree(SglangTree.locate(patched_root / "sglang"))
    assert report.routed and not report.unrouted


def test_inserted_test_files_are_black_formatted():
    """The fork test files both families add, as black writes them (SGLang's pre-commit runs
    black on every file a patch adds)."""
    from pathlib import Path

    families = Path(inserted.__file__).resolve().parents[1]
    files = sorted(families.glob("*/inserted_tests/**/*.py"))
    assert len(files) > 12
    for path in files:
        text = path.read_text()
        assert black.format_str(text, mode=black.Mode()) == text, path
