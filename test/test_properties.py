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
