"""SGLang's suite runner (``test/run_suite.py``) takes every ``*.py`` under ``test/registered/``
but ``conftest.py``, ``__init__.py`` and ``cpu/utils.py``, and hands them to
``sglang.test.ci.ci_register.collect_tests(files, sanity_check=True)``, which refuses a file
without a CI registration or without an ``if __name__ == "__main__":`` entry: one such file
the patch adds stops a fork's CI before any test runs. Checked with the installed release's
own ``collect_tests`` (0.5.11 in ``.venv``), on what ``apply`` adds and on what each patch of
the series leaves."""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest
from sglang_eagle_sizing import concerns, patch
from sglang_eagle_sizing.families.release_0_5_11 import concerns as concerns_0_5_11
from sglang_eagle_sizing.families import BEFORE_REFACTOR

#: what the suite runner leaves out of its glob of ``test/registered/``
NOT_COLLECTED = ("conftest.py", "__init__.py")


@functools.cache
def ci_register():
    """The release's ``ci_register`` module, loaded from its file (it imports nothing of
    SGLang: no need to pay for importing the package)."""
    assert importlib.metadata.version("sglang") == "0.5.11"
    package = Path(importlib.util.find_spec("sglang").origin).parent
    spec = importlib.util.spec_from_file_location(
        "ci_register", package / "test" / "ci" / "ci_register.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def collected(files: dict[str, bytes], root: Path) -> list[str]:
    """``files`` written under ``root``; the ones the suite runner collects, as it globs them."""
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    registered = root / "test" / "registered"
    return sorted(
        str(path)
        for path in registered.rglob("*.py")
        if path.name not in NOT_COLLECTED
        and path.relative_to(registered).as_posix() != "cpu/utils.py"
    )


@pytest.mark.parametrize("count", range(1, len(concerns_0_5_11.ORDER) + 1))
def test_every_file_the_patch_adds_under_test_registered_is_a_registered_test(
    count, tmp_path
):
    """Patch ``count`` of the series (the last: the whole change, GPU test included)."""
    with concerns.only(concerns_0_5_11.prefix(count)):
        files = patch.inserted_test_files(BEFORE_REFACTOR)
    paths = collected(files, tmp_path)
    assert paths, concerns_0_5_11.ORDER[count - 1]
    registries = ci_register().collect_tests(paths, sanity_check=True)
    assert sorted({r.filename for r in registries}) == paths
