"""Write docs/releases.md: every SGLang release the 0.5.23 family takes, each from its PyPI
wheel as a fork has it (a git checkout tagged ``v<version>``): ``check``'s and ``apply``'s
times, the ``note:`` lines (what the release does not have, and why), the changes made by
concern, and each fork test file the patch adds, run as a fork runs it (``python3 <file>``)
in the environment that holds the release's pins, with those pins beside the environment's.

    .venv/bin/python scripts/releases_table.py                 # every release, rewrite the doc
    .venv/bin/python scripts/releases_table.py 0.5.22 0.5.23   # only these (the doc's rows kept)

About 6 minutes a release on two cores (most of it the fork tests).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "releases.md"
TOOL = REPO / ".venv" / "bin" / "sglang-eagle-sizing"
sys.path.insert(0, str(REPO / "python"))

from sglang_eagle_sizing.families import AFTER_REFACTOR  # noqa: E402
from sglang_eagle_sizing.wheel import cached_release_wheel  # noqa: E402

#: the releases of the family it probes (tested, or on structure), and the environments whose
#: pins run their code here: each release's fork tests run in the one holding its torch and
#: transformers pins (.venv-0.5.23 from scripts/setup.sh; .venv-0.5.20 from
#: scripts/setup-release-env.sh 0.5.20, for 0.5.18-0.5.21)
RELEASES = ("0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", *AFTER_REFACTOR.tested_versions)
ENVIRONMENTS = (REPO / ".venv-0.5.23", REPO / ".venv-0.5.20")
PINNED = ("torch", "transformers", "sglang-kernel")
#: the pins an environment must hold to run a release's fork tests
MUST_MATCH = ("torch", "transformers")


def pins(wheel: Path) -> dict[str, str]:
    """``{package: version}`` of the wheel's ``Requires-Dist`` ``==`` pins of ``PINNED``."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    found = re.findall(r"^Requires-Dist: ([\w-]+)==([\w.]+)\s*$", text, re.M)
    return {name: version for name, version in found if name in PINNED}


def installed(environment: Path) -> dict[str, str]:
    """``{package: version}`` of ``PINNED`` in ``environment`` (a local build's ``+cu130``
    left out); empty when there is no such environment."""
    if not (environment / "bin" / "python").exists():
        return {}
    out = subprocess.run(
        [str(environment / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True, text=True, check=True,
    ).stdout
    return {
        p["name"]: p["version"].split("+")[0] for p in json.loads(out) if p["name"] in PINNED
    }


def environment_for(release_pins: dict[str, str]) -> Path | None:
    for environment in ENVIRONMENTS:
        held = installed(environment)
        if all(held.get(k) == release_pins.get(k) for k in MUST_MATCH):
            return environment
    return None


def git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=fork@example.com", "-c", "user.name=fork", *args],
        cwd=cwd, check=True, capture_output=True,
    )


def checkout(version: str, folder: Path) -> Path:
    """A git checkout of the release wheel's package, tagged ``v<version>``."""
    with zipfile.ZipFile(cached_release_wheel(version)) as wheel:
        wheel.extractall(
            folder / "python", [n for n in wheel.namelist() if n.startswith("sglang/")]
        )
    git(folder, "init", "-q")
    git(folder, "add", "-A")
    git(folder, "commit", "-qm", f"v{version}")
    git(folder, "tag", f"v{version}")
    return folder


def timed(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    result = subprocess.run([str(TOOL), *args], capture_output=True, text=True)
    return time.monotonic() - start, result


def fork_tests(fork: Path, environment: Path) -> list[tuple[str, str]]:
    rows = []
    for test in sorted((fork / "test/registered/unit/speculative").glob("test_*.py")):
        result = subprocess.run(
            [str(environment / "bin" / "python"), str(test)],
            cwd=fork,
            env={"PYTHONPATH": "python", "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"},
            capture_output=True, text=True, timeout=1800,
        )
        ran = re.search(r"^Ran (\d+) tests?", result.stderr, re.M)
        count = ran.group(1) if ran else "?"
        rows.append((test.name, f"OK ({count})" if result.returncode == 0 else f"**FAILED** ({count})"))
    return rows


def probe(version: str) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        fork = checkout(version, Path(scratch) / "fork")
        flag = () if version in AFTER_REFACTOR.tested_versions else ("--allow-untested-version",)
        check_time, check = timed("check", "--no-cache", *flag, str(fork))
        apply_time, applied = timed("apply", *flag, str(fork))
        if applied.returncode != 0:
            return {"version": version, "error": applied.stderr.strip().splitlines()[-1]}
        concerns = Counter(
            line.split()[-1] for line in applied.stdout.splitlines() if line.startswith("support")
        )
        notes = [l.removeprefix("note: ") for l in applied.stderr.splitlines() if l.startswith("note: ")]
        release_pins = pins(cached_release_wheel(version))
        environment = environment_for(release_pins)
        tests = fork_tests(fork, environment) if environment else []
        revert = subprocess.run(
            [str(TOOL), "revert", *flag, str(fork)], capture_output=True, text=True
        )
        clean = subprocess.run(
            ["git", "status", "--porcelain"], cwd=fork, capture_output=True, text=True
        ).stdout.strip() == "" and revert.returncode == 0
        return {
            "version": version,
            "check": round(check_time, 1),
            "apply": round(apply_time, 1),
            "concerns": dict(sorted(concerns.items())),
            "notes": notes,
            "tests": tests,
            "reverted": clean,
            "pins": release_pins,
            "environment": environment.name if environment else None,
            "environment_pins": installed(environment) if environment else {},
        }


def tested(version: str) -> str:
    return "yes" if version in AFTER_REFACTOR.tested_versions else "on structure"


def render(rows: list[dict]) -> str:
    lines = [
        "# The releases of the 0.5.23 family, each as a fork has it",
        "",
        "Generated by `scripts/releases_table.py` (do not edit; about 6 minutes a release).",
        "Each release's wheel from PyPI as a git checkout tagged `v<version>`: `check` (no",
        "cache) and `apply` timed on two shared cores, the changes `apply` made by concern,",
        "its `note:` lines (what the release does not have, and why), then every fork test",
        "file the patch added, run as a fork runs it (`python3 <file>`), and `revert` (the",
        "checkout clean again). A release `tested` is taken without `--allow-untested-version`",
        "(CI runs its fork tests); one `on structure` needs the flag. Each release's fork tests",
        "run in the environment holding its torch and transformers pins (`.venv-0.5.23` from",
        "`scripts/setup.sh`, `.venv-0.5.20` from `scripts/setup-release-env.sh 0.5.20`); a pin",
        "that environment does not hold is in bold. No GPU ran any of this.",
        "",
        "| release | tested | its pins | check | apply | changes by concern | fork tests (environment) | revert |",
        "| --- | --- | --- | ---: | ---: | --- | --- | --- |",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['version']} | - | - | - | - | refused: {row['error']} | - | - |")
            continue
        held = row.get("environment_pins") or {}
        pinned = ", ".join(
            f"{k} {v}" if held.get(k) == v else f"**{k} {v}**"
            for k, v in sorted(row["pins"].items())
        )
        changes = ", ".join(f"{k} {v}" for k, v in row["concerns"].items())
        passed = sum(1 for _, r in row["tests"] if r.startswith("OK"))
        tests = f"{passed} of {len(row['tests'])} files OK in `{row.get('environment')}`"
        if not row.get("environment"):
            tests = "not run: no environment here holds its torch and transformers"
        failed = [f"{n}: {r}" for n, r in row["tests"] if not r.startswith("OK")]
        if failed:
            tests += " (" + "; ".join(failed) + ")"
        lines.append(
            f"| {row['version']} | {tested(row['version'])} | {pinned} | {row['check']} s | {row['apply']} s | {changes} "
            f"| {tests} | {'clean' if row['reverted'] else '**not clean**'} |"
        )
    lines += ["", "## What each release does not have", ""]
    for row in rows:
        notes = row.get("notes") or []
        lines.append(f"- **{row['version']}**: " + ("; ".join(f"`{n}`" for n in notes) or "nothing: every concern is fixed."))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=list(RELEASES))
    args = parser.parse_args()
    kept = {}
    data = DOC.with_suffix(".json")
    if data.exists():
        kept = {row["version"]: row for row in json.loads(data.read_text())}
    for version in args.versions:
        print(f"{version} ...", file=sys.stderr)
        kept[version] = probe(version)
    rows = [kept[v] for v in sorted(kept, key=lambda v: tuple(int(p) for p in re.findall(r"\d+", v)))]
    data.write_text(json.dumps(rows, indent=1) + "\n")
    DOC.write_text(render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
