"""Hypothesis properties of the inserted flag parser and classmethods, run in the PATCHED SGLang
(one subprocess, the patched tree first on sys.path; see test/support/properties_patched.py).
"""

from __future__ import annotations

import re

from conftest import SUPPORT, run_python


def test_inserted_code_properties_hold_in_the_patched_tree(patched_root, libcuda_stub):
    result = run_python(
        patched_root,
        libcuda_stub,
        [
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(SUPPORT),
            str(SUPPORT / "properties_patched.py"),
        ],
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    # every property ran and held
    assert re.search(r"\b4 passed\b", summary) and "xfail" not in summary, summary


def test_engine_positions_equal_libcst_position_provider_on_every_node(pristine):
    """The engine's cheap positions (line and column of every node) are libcst's, on every file
    the rules read: findings keep the file's own line numbers."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider
    from sglang_eagle_sizing.engine import _Positions
    from sglang_eagle_sizing.tree import SglangTree

    tree = SglangTree.locate(pristine)
    for file in tree.files()[:4]:
        module = cst.parse_module(tree.read(file))
        expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(
            PositionProvider
        )
        positions = _Positions(module)
        for node, where in expected.items():
            assert positions.start(node) == (where.start.line, where.start.column), (
                file,
                node,
            )
