"""Run SGLang's own pre-commit hooks (as its releases pin them) on every patch of the series
``sglang-eagle-sizing pr --series`` writes, and report only what the patch's own lines break.

    .venv/bin/python scripts/upstream_precommit.py CHECKOUT [CHECKOUT ...]
    .venv/bin/python scripts/upstream_precommit.py --doc docs/development/upstream-precommit.md \\
        /tmp/fork-0.5.11 /tmp/fork          # both families, the table in docs/

A CHECKOUT is a git checkout of a release (``python/sglang``, tagged ``vX.Y.Z``); it is copied,
never modified. The series is written into a temporary folder (``--series DIR``: check that one
instead; one CHECKOUT only). Every patch is applied with ``git am`` on the copy; each hook runs on
the Python files the patch adds or changes, as they are after it, and on the same files before
it (for the first patch touching a file: the release's file). A finding is kept when it falls on
a line the patch added or changed; a whole-file finding when the file before the patch did not
have it. Fixing hooks (black, isort, trailing-whitespace, end-of-file-fixer) run on a scratch copy
and a finding is a block of lines they would rewrite.

Prints ``patch NNNN: file:line: hook: message`` per violation and a summary table; exit 1 if
any. The tools are installed from PyPI, at SGLang's pins, into a venv of their own under
``~/.cache/sglang-eagle-sizing/precommit-<family>/`` (reused when present).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / ".venv" / "bin" / "sglang-eagle-sizing"
CACHE = Path.home() / ".cache" / "sglang-eagle-sizing"
GIT_ID = ["-c", "user.name=upstream-precommit", "-c", "user.email=upstream-precommit@localhost"]


# -- the hook set, as our own data --------------------------------------------------------------
# Facts read from public copies (none of SGLang's files is kept here):
# - sgl-project/sglang .pre-commit-config.yaml: the stored upstream versions are e7204756
#   (2025, ruff v0.11.2) and 00e8a8c8 (0.5.3 era: pre-commit-hooks v5.0.0, isort 5.13.2,
#   ruff v0.11.7 --select=F401 on benchmark/docs/examples only, black 24.10.0, codespell v2.4.1).
#   No stored upstream version is near 0.5.11 (wheel built 2026-05-07) or 0.5.23 (2026-10-30).
# - upstream PR #18860 (merged 2026-02-15): pre-commit-hooks v5.0.0 -> v6.0.0, isort 5.13.2 -> up.
# - a contributor's note pinned to upstream main 4b0f629082 (2026-06-06, a month after 0.5.11):
#   "sglang pinned hooks: isort 7.0.0, black 26.1.0, ruff 0.15.1 (--select=F401,F821),
#   codespell 2.4.1".
# - efschu/htsglang ce60b963 (a renamed fork of recent upstream main, the newest full config in
#   the index): pre-commit-hooks v6.0.0 (check-added-large-files --maxkb=1500), isort 7.0.0,
#   ruff v0.15.1 --select=F401,F821,UP037 --fix on ^(benchmark/|docs/|examples/|python/sglang/|
#   sgl-model-gateway/py_*|test/) but not __init__.py, black 26.1.0 (black-jupyter),
#   codespell v2.4.1 --config .codespellrc.
# - upstream .isort.cfg (4c3cd2d6): profile=black, known_first_party=sglang.
# - upstream .codespellrc (00f8c597): the ignore list below; skip json/jsonl/patch/txt/lock.
# No [tool.black], [tool.isort] or [tool.ruff] in upstream's pyproject files: tool defaults.
# Version.py cannot date a commit: since 0.5.4 it reads the version from git (setuptools-scm).
@dataclass(frozen=True)
class HookSet:
    family: str
    source: str
    pins: tuple[str, ...]
    ruff_select: str
    ruff_files: str = r"^(benchmark/|docs/|examples/|python/sglang/|sgl-model-gateway/py_.*|test/)"
    ruff_exclude: str = r"(^|/)__init__\.py$|\.ipynb$|^python/sglang/srt/grpc/.*_pb2(_grpc)?\.pyi?$"
    large_file_kb: int = 1500
    codespell_ignore: str = (
        "ans, als, hel, boostrap, childs, te, vas, hsa, ment, cann, thi, makro, wil, rouge, PRIS, "
        "ather, MIS, medias, allready, inout, nd, fo, visibles, nothink, renderD"
    )
    isort_cfg: str = "[settings]\nprofile=black\nknown_first_party=sglang\n"

    def venv(self) -> Path:
        return CACHE / f"precommit-{self.family}"


_PINS = ("pre-commit-hooks==6.0.0", "isort==7.0.0", "black==26.1.0", "codespell==2.4.1")
HOOK_SETS = {
    "0.5.11": HookSet(
        family="0.5.11",
        source="upstream main 4b0f629082 (2026-06-06) pins; layout of efschu/htsglang ce60b963",
        pins=(*_PINS, "ruff==0.15.1"),
        ruff_select="F401,F821",
    ),
    "0.5.23": HookSet(
        family="0.5.23",
        source="efschu/htsglang ce60b963 (renamed fork of upstream main, newest in the index)",
        pins=(*_PINS, "ruff==0.15.1"),
        ruff_select="F401,F821,UP037",
    ),
}
#: hooks of the config that never act on a regular .py file a patch writes: say why, once
NOT_RUN = {
    "check-symlinks / destroyed-symlinks": "the patches add no symlinks",
    "check-yaml / check-toml / clang-format / nbstripout / rustfmt / lychee": "not Python",
    "check-merge-conflict": "acts only during a merge (no --assume-in-merge upstream)",
    "no-commit-to-branch": "about the branch, not a file",
    "check-chinese-characters": "only python/sglang/multimodal_gen/, which no patch touches",
}


def family_of_tag(tag: str) -> str:
    """``v0.5.9``-``v0.5.11`` -> the 0.5.11 hook set; ``v0.5.12`` and later -> 0.5.23's."""
    m = re.fullmatch(r"v?0\.5\.(\d+)(\.post\d+)?", tag)
    if not m:
        raise ValueError(tag)
    return "0.5.11" if int(m.group(1)) <= 11 else "0.5.23"


def ensure_tools(hooks: HookSet) -> Path:
    """The venv's bin/, with the pinned tools and our config files; built once."""
    root = hooks.venv()
    marker = root / "pins.json"
    want = {"pins": list(hooks.pins), "isort": hooks.isort_cfg, "codespell": hooks.codespell_ignore}
    if not (marker.exists() and json.loads(marker.read_text()) == want):
        if root.exists():
            shutil.rmtree(root)
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        subprocess.run([str(root / "bin" / "pip"), "install", "-q", *hooks.pins], check=True)
        (root / ".isort.cfg").write_text(hooks.isort_cfg)
        (root / "codespellrc").write_text(
            f"[codespell]\nignore-words-list = {hooks.codespell_ignore}\n"
            "skip = *.json, *.jsonl, *.patch, *.txt, *.lock\n"
        )
        marker.write_text(json.dumps(want))
    return root / "bin"


# -- what a patch added --------------------------------------------------------------------------
def added_lines(diff: str) -> dict[str, set[int]]:
    """From a ``git diff -U0`` (new side ``b/``): file -> the numbers of the lines it added or
    changed, in the new file."""
    out: dict[str, set[int]] = {}
    current = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            current = None if line == "+++ /dev/null" else line[6:]
            if current is not None:
                out.setdefault(current, set())
        elif line.startswith("@@") and current is not None:
            m = re.match(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", line)
            start, count = int(m.group(1)), int(m.group(2) or "1")
            out[current].update(range(start, start + count))
    return out


# -- findings ------------------------------------------------------------------------------------
@dataclass
class Finding:
    path: str
    hook: str
    message: str
    #: the lines it covers (empty: the whole file)
    lines: tuple[int, ...] = ()
    #: for a rewrite: the text of the lines it rewrites, to match it against the file before
    old: tuple[str, ...] = field(default=(), compare=False)

    @property
    def line(self) -> int:
        return self.lines[0] if self.lines else 0

    def key(self) -> tuple:
        return (self.path, self.hook, self.message if not self.lines else "")


def rewrite_blocks(path: str, hook: str, before: str, after: str) -> list[Finding]:
    """What a fixing hook changed, as blocks of the original's lines (1-based)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    found = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        # an insertion sits between two lines: it belongs to both
        near = range(i1 + 1, i2 + 1) if i2 > i1 else (i1, i1 + 1)
        lines = tuple(n for n in near if 1 <= n <= len(a)) or (max(len(a), 1),)
        new = "".join(b[j1:j2]).strip().splitlines()
        span = f"{lines[0]}-{lines[-1]}" if len(lines) > 1 else f"{lines[0]}"
        message = f"would rewrite line {span}" + (f" as {new[0].strip()!r}" if new else "")
        if len(new) > 1:
            message += f" (+{len(new) - 1} lines)"
        found.append(Finding(path, hook, message, lines, tuple(a[i1:i2])))
    return found


def keep(finding: Finding, added: set[int], before: list[Finding]) -> Finding | None:
    """The patch's own: on a line it added, or a whole-file finding the file did not have."""
    if finding.lines:
        if not added.intersection(finding.lines):
            return None
        # a rewrite that also covers lines the patch left alone, which the hook rewrites in the
        # file before the patch too: say so (still the patch's: it touched the block)
        untouched = {
            finding.old[i].strip()
            for i, n in enumerate(finding.lines[: len(finding.old)])
            if n not in added and finding.old[i].strip()
        }
        if untouched and any(
            untouched & {t.strip() for t in b.old} for b in before if b.hook == finding.hook
        ):
            finding.message += " (the file before the patch is rewritten here too)"
        return finding
    return None if finding.key() in {b.key() for b in before} else finding


# -- the hooks -----------------------------------------------------------------------------------
def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)


def _fixer(bin_: Path, root: Path, paths: list[str], hook: str, cmd: list[str]) -> list[Finding]:
    if not paths:
        return []
    original = {p: (root / p).read_text() for p in paths}
    _run([str(bin_ / cmd[0]), *cmd[1:], *paths], root)
    found = []
    for p in paths:
        found += rewrite_blocks(p, hook, original[p], (root / p).read_text())
        (root / p).write_text(original[p])
    return found


_LOCATED = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+):(?:\d+:)?\s*(?P<message>.*)$")


def _located(out: str, hook: str) -> list[Finding]:
    found = []
    for line in out.splitlines():
        m = _LOCATED.match(line)
        if m:
            found.append(Finding(m["path"], hook, m["message"].strip(), (int(m["line"]),)))
    return found


def run_hooks(
    hooks: HookSet,
    bin_: Path,
    root: Path,
    paths: list[str],
    new_files: set[str],
    repo: Path | None = None,
) -> list[Finding]:
    """Every hook that acts on .py files, over ``paths`` under ``root``."""
    found = []
    found += _fixer(bin_, root, paths, "trailing-whitespace", ["trailing-whitespace-fixer"])
    found += _fixer(bin_, root, paths, "end-of-file-fixer", ["end-of-file-fixer"])
    found += _fixer(
        bin_, root, paths, "isort", ["isort", "-q", "--settings-path", str(bin_.parent)]
    )
    found += _fixer(bin_, root, paths, "black-jupyter", ["black", "-q"])
    for p in paths:
        try:
            compile((root / p).read_text(), p, "exec", dont_inherit=True)
        except SyntaxError as e:
            found.append(Finding(p, "check-ast", f"not valid Python: {e.msg}", (e.lineno or 1,)))
    found += _located(
        _run([str(bin_ / "debug-statement-hook"), *paths], root).stdout, "debug-statements"
    )
    out = _run([str(bin_ / "detect-private-key"), *paths], root).stdout
    found += [
        Finding(p, "detect-private-key", "private key found")
        for p in paths
        if f"Private key found: {p}" in out
    ]
    added = [p for p in paths if p in new_files]
    if added:
        out = _run(
            [
                str(bin_ / "check-added-large-files"),
                f"--maxkb={hooks.large_file_kb}",
                "--enforce-all",
                *added,
            ],
            root,
        ).stdout
        found += [
            Finding(p, "check-added-large-files", "over the size limit") for p in added if p in out
        ]
    if repo is not None:
        out = _run([str(bin_ / "check-shebang-scripts-are-executable"), *paths], repo).stderr
        found += [
            Finding(p, "check-shebang-scripts-are-executable", "has a shebang, not +x")
            for p in paths
            if p in out
        ]
    linted = [
        p for p in paths if re.search(hooks.ruff_files, p) and not re.search(hooks.ruff_exclude, p)
    ]
    if linted:
        out = _run(
            [
                str(bin_ / "ruff"),
                "check",
                "--isolated",
                "--no-cache",
                f"--select={hooks.ruff_select}",
                "--output-format=json",
                *linted,
            ],
            root,
        ).stdout
        for d in json.loads(out or "[]"):
            path = os.path.relpath(d["filename"], root)
            found.append(
                Finding(path, "ruff", f"{d['code']} {d['message']}", (d["location"]["row"],))
            )
    out = _run(
        [str(bin_ / "codespell"), "--config", str(bin_.parent / "codespellrc"), *paths], root
    ).stdout
    found += [Finding(f.path, "codespell", f.message, f.lines) for f in _located(out, "codespell")]
    return found


# -- a series ------------------------------------------------------------------------------------
def git(repo: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *GIT_ID, *args], cwd=repo, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} in {repo}: {result.stderr.strip()}")
    return result.stdout


@dataclass
class PatchResult:
    number: str
    subject: str
    files: list[str]
    findings: list[Finding]


def check_series(checkout: Path, series: Path, hooks: HookSet, work: Path) -> list[PatchResult]:
    bin_ = ensure_tools(hooks)
    repo = work / "checkout"
    shutil.copytree(checkout, repo, symlinks=True)
    results = []
    for patch in sorted(series.glob("*.patch")):
        git(repo, "am", "-q", str(patch))
        subject = git(repo, "log", "-1", "--format=%s").strip()
        changes = added_lines(
            git(repo, "diff", "-U0", "--diff-filter=AM", "HEAD~1", "HEAD", "--", "*.py")
        )
        new_files = set(
            git(repo, "diff", "--name-only", "--diff-filter=A", "HEAD~1", "HEAD").split()
        )
        paths = sorted(changes)
        scratch = work / "scratch"
        for side in ("after", "before"):
            shutil.rmtree(scratch / side, ignore_errors=True)
        for p in paths:
            (scratch / "after" / p).parent.mkdir(parents=True, exist_ok=True)
            (scratch / "after" / p).write_text((repo / p).read_text())
            if p not in new_files:
                (scratch / "before" / p).parent.mkdir(parents=True, exist_ok=True)
                (scratch / "before" / p).write_text(git(repo, "show", f"HEAD~1:{p}"))
        after = run_hooks(hooks, bin_, scratch / "after", paths, new_files, repo)
        old_paths = [p for p in paths if p not in new_files]
        before = run_hooks(hooks, bin_, scratch / "before", old_paths, set()) if old_paths else []
        kept = [k for f in after if (k := keep(f, changes[f.path], before)) is not None]
        kept.sort(key=lambda f: (f.path, f.line, f.hook))
        results.append(PatchResult(patch.name[:4], subject, paths, kept))
    return results


def write_series(checkout: Path, out: Path, gpu_test: bool = False) -> None:
    result = subprocess.run(
        [
            str(TOOL),
            "pr",
            "--series",
            str(out),
            str(checkout),
            "--author",
            "upstream-precommit <upstream-precommit@localhost>",
            *(["--with-gpu-test"] if gpu_test else []),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(
            f"sglang-eagle-sizing pr --series on {checkout} failed: "
            f"{(result.stderr or result.stdout).strip().splitlines()[-1:]}"
        )


def release_tag(checkout: Path) -> str:
    tags = [t for t in git(checkout, "tag", "--points-at", "HEAD").split() if t.startswith("v")]
    if not tags:
        raise SystemExit(f"{checkout}: HEAD has no vX.Y.Z tag (a release checkout is tagged)")
    return tags[0]


# -- reporting -----------------------------------------------------------------------------------
def violation_lines(results: list[PatchResult]) -> list[str]:
    return [
        f"patch {r.number}: {f.path}:{f.line}: {f.hook}: {f.message}"
        for r in results
        for f in r.findings
    ]


def summary_table(results: list[PatchResult]) -> list[str]:
    hooks = sorted({f.hook for r in results for f in r.findings})
    head = ["patch", "subject", "py files", *hooks, "total"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        counts = [sum(f.hook == h for f in r.findings) for h in hooks]
        subject = r.subject.replace("|", "\\|")
        rows.append(
            "| "
            + " | ".join(
                [r.number, subject, str(len(r.files)), *map(str, counts), str(len(r.findings))]
            )
            + " |"
        )
    total = [sum(f.hook == h for r in results for f in r.findings) for h in hooks]
    rows.append(
        "| "
        + " | ".join(
            ["all", "", str(sum(len(r.files) for r in results)), *map(str, total), str(sum(total))]
        )
        + " |"
    )
    return rows


def _describe() -> str:
    result = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return f"commit {result.stdout.strip()}" if result.returncode == 0 else "an unknown commit"


def doc(runs: list[tuple[str, HookSet, list[PatchResult]]], gpu_test: bool = False) -> str:
    out = [
        "# SGLang's own pre-commit hooks on the series",
        "",
        (
            "Generated by `scripts/upstream_precommit.py --doc "
            "docs/development/upstream-precommit.md <0.5.11 checkout> <0.5.23 checkout>`; "
            "do not edit by hand. Each patch of "
            "`sglang-eagle-sizing pr --series` is applied with `git am` on a copy of a release "
            "checkout; SGLang's hooks run on the Python files it adds or changes, and a violation "
            "is listed only on lines the patch added or changed (whole-file hooks: only if the file "
            "before the patch passed)."
        ),
        "",
        "## The hook set",
        "",
        (
            "No stored upstream `.pre-commit-config.yaml` is near 0.5.11 (wheel built 2026-05-07) "
            "or 0.5.23 (2026-10-30), and `python/sglang/version.py` has read the version from git "
            "since 0.5.4, so no commit could be dated by it. The pins come from:"
        ),
        "",
        (
            "- upstream main `4b0f629082` (2026-06-06; a contributor's note of its pinned hooks): "
            "isort 7.0.0, black 26.1.0, ruff 0.15.1 `--select=F401,F821`, codespell 2.4.1;"
        ),
        (
            "- `efschu/htsglang` `ce60b963` (a renamed fork of recent upstream main, the newest full "
            "config stored): the same pins, pre-commit-hooks v6.0.0, ruff "
            "`--select=F401,F821,UP037` on `python/sglang/`, `test/`, ... (not `__init__.py`), "
            "codespell `--config .codespellrc`;"
        ),
        (
            "- upstream `.isort.cfg` `4c3cd2d6` (profile black, sglang first party), `.codespellrc` "
            "`00f8c597` (ignore list); upstream PR #18860 (2026-02-15) moved pre-commit-hooks to "
            "v6.0.0."
        ),
        "",
        "| family | pins | ruff --select | source |",
        "|---|---|---|---|",
    ]
    for tag, hooks, _ in runs:
        out.append(
            f"| {hooks.family} (checkout {tag}) | {', '.join(hooks.pins)} | "
            f"{hooks.ruff_select} | {hooks.source} |"
        )
    rev = os.environ.get("UPSTREAM_PRECOMMIT_TOOL_REV") or _describe()
    flag = " --with-gpu-test" if gpu_test else ""
    out += ["", f"Series written by `sglang-eagle-sizing pr --series{flag}` at {rev}."]
    out += ["", "Not run (they never act on a Python file a patch writes):", ""]
    out += [f"- {k}: {v}" for k, v in NOT_RUN.items()]
    for tag, hooks, results in runs:
        lines = violation_lines(results)
        out += ["", f"## {hooks.family} family (checkout {tag}): {len(lines)} violations", ""]
        if lines:
            out += ["```", *lines, "```", ""]
        out += summary_table(results)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path, metavar="CHECKOUT")
    parser.add_argument("--series", type=Path, help="check this series (one CHECKOUT only)")
    parser.add_argument("--doc", type=Path, help="also write the markdown report here")
    parser.add_argument(
        "--with-gpu-test",
        action="store_true",
        help="write the series with its GPU end-to-end test patch too",
    )
    args = parser.parse_args(argv)
    if args.series and len(args.checkouts) != 1:
        parser.error("--series goes with one CHECKOUT")
    started = time.monotonic()
    runs = []
    for checkout in args.checkouts:
        if not (checkout / ".git").exists() or not (checkout / "python" / "sglang").is_dir():
            raise SystemExit(f"{checkout}: not a git checkout holding python/sglang")
        tag = release_tag(checkout)
        try:
            hooks = HOOK_SETS[family_of_tag(tag)]
        except ValueError:
            raise SystemExit(f"{checkout}: tag {tag} is not a 0.5.x release") from None
        with tempfile.TemporaryDirectory(prefix="upstream-precommit-") as tmp:
            series = args.series
            if series is None:
                series = Path(tmp) / "series"
                write_series(checkout, series, args.with_gpu_test)
            results = check_series(checkout, series, hooks, Path(tmp))
        runs.append((tag, hooks, results))
        print(f"# {hooks.family} family, checkout {tag}")
        print("\n".join(violation_lines(results)))
        print("\n".join(summary_table(results)))
    if args.doc:
        args.doc.write_text(doc(runs, args.with_gpu_test))
    print(f"ran in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 1 if any(r.findings for _, _, results in runs for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
