"""The pre-commit guard on the upstream merges of ``test/support/upstream_merges.py``, timed:
for each, on a checkout tagged ``v<release>`` with the patch committed, the merge, then the
hook's entry as pre-commit runs it (its message, exit code and wall time), then ``apply`` (exit
code and its first ``error:`` line, if any); and a commit that touches nothing the hook
watches, with pre-commit itself when ``--pre-commit PATH`` names its executable (the hook from
this checkout, ``repo: local``), else the ``files`` filter alone.

    .venv/bin/python benchmark/upstream_merges.py [--pre-commit PATH] [--release 0.5.23]

About 3 minutes on two cores (each merge's ``check`` reads the tree cold).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _common import REPO, machine  # noqa: E402

sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "test" / "support"))

from upstream_merges import MERGES, git, hook, merge_upstream, run_hook  # noqa: E402

TOOL = [sys.executable, "-m", "sglang_eagle_sizing"]


def tool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    return subprocess.run([*TOOL, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)


def patched_checkout(release: str, folder: Path) -> Path:
    from sglang_eagle_sizing.wheel import cached_release_wheel

    fork = folder / "fork"
    with zipfile.ZipFile(cached_release_wheel(release)) as archive:
        names = [n for n in archive.namelist() if n.startswith("sglang/") and n != "sglang/_version.py"]
        archive.extractall(fork / "python", names)
    own = fork / "test/registered/unit/speculative/test_fork_own.py"
    own.parent.mkdir(parents=True)
    own.write_text('"""A test the fork already has."""\n')
    git(fork, "init", "-q")
    git(fork, "config", "gc.auto", "0")
    git(fork, "add", "-A")
    git(fork, "commit", "-qm", f"v{release}")
    git(fork, "tag", f"v{release}")
    assert tool("apply", "-q", ".", cwd=fork).returncode == 0
    git(fork, "add", "-A")
    git(fork, "commit", "-qm", "apply the EAGLE sizing patch")
    return fork


def untouched_commit(fork: Path, pre_commit: str | None) -> str:
    (fork / "README.md").write_text("the fork's own notes\n")
    git(fork, "add", "README.md")
    if pre_commit is None:
        start = time.perf_counter()
        git(fork, "commit", "-qm", "notes")
        skipped = run_hook(fork) is None
        return f"`files` filter: {'skipped' if skipped else 'RAN'}, {time.perf_counter() - start:.2f} s with the commit"
    entry = hook()
    config = {
        "repos": [{"repo": "local", "hooks": [{
            **{k: entry[k] for k in ("id", "name", "entry", "files", "pass_filenames")},
            "language": "system",
        }]}]
    }
    import yaml

    (fork / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    git(fork, "add", ".pre-commit-config.yaml")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
               PYTHONPATH=str(REPO / "python"))

    def timed() -> tuple[subprocess.CompletedProcess, float]:
        start = time.perf_counter()
        run = subprocess.run([pre_commit, "run"], cwd=fork, env=env, capture_output=True,
                             text=True, check=False)
        return run, time.perf_counter() - start

    timed()  # pre-commit's own first-run set-up is not the hook's
    runs = [timed() for _ in range(3)]
    run = runs[-1][0]
    line = next((x for x in run.stdout.splitlines() if "EAGLE" in x), run.stdout.strip())
    # the same commit with no hook at all: what pre-commit costs by itself
    (fork / ".pre-commit-config.yaml").write_text("repos: []\n")
    bare = [timed()[1] for _ in range(3)]
    return (f"pre-commit run: exit {run.returncode}, "
            f"{', '.join(f'{t:.2f}' for _, t in runs)} s (pre-commit with no hook: "
            f"{', '.join(f'{t:.2f}' for t in bare)} s): {' '.join(line.split())}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pre-commit", help="pre-commit's executable (default: the files filter alone)")
    parser.add_argument("--release", choices=("0.5.11", "0.5.23"), help="only this family's merges")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="eagle-sizing-merges-"))
    os.environ["PYTHONPATH"] = str(REPO / "python")  # the hook's console script imports this tool
    print(f"machine: {machine()}; load average: {os.getloadavg()}")
    try:
        bases: dict[str, Path] = {}
        for index, merge in enumerate(m for m in MERGES if args.release in (None, m.release)):
            if merge.release not in bases:
                bases[merge.release] = patched_checkout(merge.release, scratch / merge.release)
                print(f"\n{merge.release}: untouched commit: "
                      + untouched_commit(_copy(bases[merge.release], scratch / f"u{index}"), args.pre_commit))
            fork = _copy(bases[merge.release], scratch / f"m{index}")
            merge_upstream(fork, merge)
            start = time.perf_counter()
            guard = run_hook(fork)
            seconds = time.perf_counter() - start
            print(f"\n### {merge.release}: upstream: {merge.name}")
            if guard is None:
                print("hook: SKIPPED")
                continue
            print(f"hook: exit {guard.returncode}, {seconds:.1f} s")
            for line in (guard.stdout + guard.stderr).splitlines():
                print("    " + line)
            if guard.returncode != 0:
                applied = tool("apply", ".", cwd=fork)
                error = next((x for x in applied.stderr.splitlines() if x.startswith("error:")), "")
                print(f"apply: exit {applied.returncode} {error}".rstrip())
                if applied.returncode == 0:
                    print(f"check after apply: exit {tool('check', '.', cwd=fork).returncode}; "
                          f"whole: {merge.whole(fork)}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


if __name__ == "__main__":
    sys.exit(main())
