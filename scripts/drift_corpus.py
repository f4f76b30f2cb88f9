"""The drift corpus as git checkouts: for each variant of test/support/drift.py, a git checkout of
the 0.5.11 release tree (from the release wheel) with the variant's edits committed and tagged
v0.5.11, then ``git apply --check`` of the diff the tool writes for the pristine release, and
``sglang-eagle-sizing apply .`` at the checkout's root. Prints the markdown table of
docs/robustness.md ("Drift: a fork is never the release").

    PYTHONPATH=python .venv/bin/python scripts/drift_corpus.py [VARIANT ...]

Takes about ten seconds per variant on an idle 2-core machine (most of it ``apply``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test" / "support"))

import drift  # noqa: E402
from sglang_eagle_sizing.cli import main as cli_main  # noqa: E402
from sglang_eagle_sizing.wheel import cached_release_wheel  # noqa: E402


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-c", "user.name=drift", "-c", "user.email=drift@example.com", *args],
        cwd=cwd, capture_output=True, text=True, check=check,
    )


def _cli(cwd: Path, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(list(args))
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def checkout(release: Path, target: Path, edits: dict[str, str]) -> Path:
    shutil.copytree(release, target / "python" / "sglang", ignore=shutil.ignore_patterns("_version.py"))
    (target / "test" / "registered").mkdir(parents=True)
    (target / "test" / "registered" / "README").write_text("the fork's tests\n")
    for file, text in edits.items():
        (target / "python" / "sglang" / "srt" / file).write_text(text)
    _git(target, "init", "-q")
    _git(target, "add", "-A")
    _git(target, "commit", "-q", "-m", "fork")
    _git(target, "tag", "v0.5.11")
    return target


def git_apply(fork: Path, diff: Path) -> str:
    result = _git(fork, "apply", "--check", str(diff), check=False)
    if result.returncode == 0:
        return "applies"
    failed = sorted(set(re.findall(r"error: patch failed: ([^:]+):", result.stderr)))
    return f"fails, {len(failed)} file{'s' if len(failed) != 1 else ''}"


def tool_apply(fork: Path, variant: drift.Variant) -> str:
    code, out, err = _cli(fork, "apply", ".")
    if code == 0:
        check = _cli(fork, "check", ".")[0]
        routed = sum(line.startswith("routed ") for line in out.splitlines())
        return f"routed ({routed} sites), exit 0, check {'passes' if check == 0 else 'FAILS'}"
    first = next((line for line in err.splitlines() if line.strip()), "")
    return f"refused, exit {code}: `{first[:160]}`"


def main(names: list[str]) -> int:
    chosen = [v for v in drift.VARIANTS if not names or v.name in names]
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        with zipfile.ZipFile(cached_release_wheel()) as wheel:
            wheel.extractall(root / "wheel", [n for n in wheel.namelist() if n.startswith("sglang/")])
        release = root / "wheel" / "sglang"
        pristine = checkout(release, root / "pristine", {})
        code, diff_text, err = _cli(pristine, "diff", ".")
        assert code == 0, err
        diff = root / "pristine.diff"
        diff.write_text(diff_text)
        files = {f: (release / "srt" / f).read_text() for f in drift.FORMATTED}
        print("| variant | drift | `git apply` of the pristine diff | `sglang-eagle-sizing apply .` | expected |")
        print("| --- | --- | --- | --- | --- |")
        for variant in chosen:
            fork = checkout(release, root / variant.name, variant.edit(dict(files)))
            expected = variant.outcome
            if variant.refusal:
                expected += f" at {variant.refusal[0]} (`{variant.refusal[1].strip()}`)"
            print(
                f"| {variant.name} | {variant.drift} | {git_apply(fork, diff)} | "
                f"{tool_apply(fork, variant)} | {expected} |",
                flush=True,
            )
            shutil.rmtree(fork)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
