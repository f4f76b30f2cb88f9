"""The releases before 0.5.11 that carry the same sites (0.5.9, 0.5.10, 0.5.10.post1, their
wheels from PyPI): ``apply --allow-untested-version`` routes the same 14 sizing sites, ``check``
then passes, ruff finds nothing new in the changed files (no unused local left, F841), and
``revert`` gives back every byte. They stay refused without the flag (test_versions.py): their
fork CPU test is not run here (see docs/robustness.md, Versions)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections import Counter

import pytest
from conftest import read_by_commands, run_cli, tree_digest
from sglang_eagle_sizing.sites import SITE_FILES
from sglang_eagle_sizing.wheel import cached_release_wheel

ALLOW = "--allow-untested-version"



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


@pytest.mark.parametrize("version", ["0.5.9", "0.5.10", "0.5.10.post1"])
def test_an_older_release_routes_checks_lints_and_reverts(version, tmp_path):
    with zipfile.ZipFile(cached_release_wheel(version)) as wheel:
        wheel.extractall(tmp_path, [n for n in wheel.namelist() if read_by_commands(n)])
    package = tmp_path / "sglang"
    release = {f: (package / "srt" / f).read_bytes() for f in SITE_FILES}
    before = tree_digest(package)
    code, out, err = run_cli("apply", ALLOW, str(package))
    assert code == 0, err
    assert err.splitlines()[0].startswith(f"warning: SGLang {version} (")
    assert sum(line.startswith("routed ") for line in out.splitlines()) == 14
    assert run_cli("check", ALLOW, "--no-cache", str(package))[0] == 0
    changed = [f for f in SITE_FILES if (package / "srt" / f).read_bytes() != release[f]]
    assert len(changed) == 13  # the files apply changes in 0.5.11 too
    # nothing new for ruff, line numbers aside (0.5.10's model_config local included)
    after = _lint(package / "srt", changed)
    for f in changed:
        (package / "srt" / f).rename(package / "srt" / (f + ".patched"))
        (package / "srt" / f).write_bytes(release[f])
    pristine = _lint(package / "srt", changed)
    for f in changed:
        (package / "srt" / (f + ".patched")).replace(package / "srt" / f)
    assert after - pristine == Counter(), after - pristine
    assert run_cli("revert", ALLOW, str(package))[0] == 0
    assert tree_digest(package) == before
