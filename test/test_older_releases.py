"""The tested releases before 0.5.11 (0.5.9, 0.5.10, 0.5.10.post1, their wheels from PyPI):
accepted without ``--allow-untested-version``, ``apply`` routes the same 15 sizing sites,
``check`` then passes, ruff finds nothing new in the changed files (no unused local left,
F841), ``revert`` gives back every byte, and the fork's CPU tests (the folder ``apply`` adds to a
checkout) passes on each patched tree, run as SGLang's CPU CI runs it (no libcuda) through
``support/older_release_compat.py``, which gives the release the few pieces of 0.5.11's API
the file uses and the release lacks (the file the fork gets carries no shim for them). One test for the three: the fork test runs, two at a time, in the background while
the next release is applied. Other versions stay refused by name (test_versions.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import REPO, SUPPORT, run_cli, tree_digest
from sglang_eagle_sizing.families.release_0_5_11.sites import GET_CONFIG_FILES, SITE_FILES
from sglang_eagle_sizing.families import BEFORE_REFACTOR
from sglang_eagle_sizing.wheel import cached_release_wheel

sys.path.insert(0, str(SUPPORT))
from mutants import run_test_file, with_harness

OLDER = ["0.5.9", "0.5.10", "0.5.10.post1"]
COMPAT = SUPPORT / "older_release_compat.py"
#: the fork's CPU tests: every file of the folder, in one process
CPU_TESTS = (
    REPO / "python/sglang_eagle_sizing/families/release_0_5_11/inserted_tests"
    / "test/registered/unit/speculative/eagle_hidden_sizing"
)


def test_the_older_releases_are_the_tested_ones_before_0_5_11():
    assert list(BEFORE_REFACTOR.tested_versions) == [*OLDER, "0.5.11"]


def _lint(srt, files) -> Counter:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F841,F821,F811",
         "--output-format", "json", *[str(srt / f) for f in files]],
        capture_output=True, text=True,
    )
    assert result.returncode in (0, 1), result.stderr
    return Counter(
        (d["filename"].split("/srt/")[1], d["code"], d["message"]) for d in json.loads(result.stdout)
    )


def _apply(package: Path, version: str) -> None:
    """``apply`` without the flag: no warning, the 15 sizing sites routed."""
    code, out, err = run_cli("apply", str(package))
    assert code == 0, err
    assert sum(line.startswith("routed ") for line in out.splitlines()) == 15
    # no warning: only the summary, on stderr
    assert len(err.splitlines()) == 1
    assert err.startswith(f"applied to SGLang {version} (")


def _unchanged_by_lint(srt: Path, release: dict[str, bytes]) -> None:
    """ruff finds nothing new in the files apply changed, line numbers aside (0.5.9-0.5.10's
    ``model_config`` local included)."""
    changed = [f for f in release if (srt / f).read_bytes() != release[f]]
    assert len(changed) == 16  # the files apply changes in 0.5.11 too
    after = _lint(srt, changed)
    for f in changed:
        (srt / f).rename(srt / (f + ".patched"))
        (srt / f).write_bytes(release[f])
    pristine = _lint(srt, changed)
    for f in changed:
        (srt / (f + ".patched")).replace(srt / f)
    assert after - pristine == Counter(), after - pristine


def _digest(root: Path) -> dict[str, str]:
    """The tree's files, without the bytecode Python writes when the fork test runs."""
    return {k: v for k, v in tree_digest(root).items() if "__pycache__" not in k}


def test_each_older_release_routes_checks_lints_passes_its_fork_test_and_reverts(tmp_path):
    """Per release, its whole package (the fork test imports the workers, the scheduler and
    the model runner): ``apply`` without the flag, ``check``, ruff; then the fork's CPU test
    on the patched tree, in the background (two at a time; each imports the worker modules,
    ~20 s) while the next release is applied; ``revert`` gives back every byte."""
    trees, runs = {}, {}
    with ThreadPoolExecutor(2) as pool:
        for version in OLDER:
            root = tmp_path / version
            with zipfile.ZipFile(cached_release_wheel(version)) as wheel:
                wheel.extractall(root, [n for n in wheel.namelist() if n.startswith("sglang/")])
            package = root / "sglang"
            read = [*SITE_FILES, *(f for f in GET_CONFIG_FILES if (package / "srt" / f).is_file())]
            release = {f: (package / "srt" / f).read_bytes() for f in read}
            trees[version] = (package, _digest(root))
            _apply(package, version)
            code, _, err = run_cli("check", "--no-cache", str(package))
            assert code == 0 and err.startswith(f"checked SGLang {version} ("), err
            _unchanged_by_lint(package / "srt", release)
            fork_root = with_harness(root, tmp_path / f"{version}-with-harness")
            runs[version] = pool.submit(run_test_file, fork_root, CPU_TESTS, runner=COMPAT)
        for version, future in runs.items():
            run = future.result()
            assert run.returncode == 0 and run.failed == (), (version, run.output[-4000:])
            assert "\nOK" in run.output, (version, run.output[-2000:])
    for version, (package, before) in trees.items():
        assert run_cli("revert", str(package))[0] == 0, version
        assert _digest(package.parent) == before, version
