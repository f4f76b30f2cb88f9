"""Run upstream SGLang's own CPU unit tests that touch the files the 0.5.23 series changes, on
0.5.23 as released and on the patched tree, test by test, and write the table into
docs/release-0.5.23.md (between ``<!-- upstream-tests-0.5.23 -->`` and its closing marker).

    .venv/bin/python scripts/upstream_tests_table.py [CACHE]      # rewrite the table
    .venv/bin/python scripts/upstream_tests_table.py --print      # print it, write nothing

CACHE (default ``~/.cache/sglang-eagle-sizing/upstream-tests-0.5.23``, under
``$SGLANG_EAGLE_SIZING_CACHE`` when set) holds the test files at their upstream paths and a
``SOURCES.json``: ``{"files": {path: commit}, "not_run": {path: reason}}``. The files are
fetched from upstream by hand and never kept in this repository. Each file runs once per tree
with ``.venv-0.5.23``'s pytest and ``PYTHONPATH`` at the tree; about a minute on two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from sglang_eagle_sizing.engine import cache_root  # noqa: E402, RUF100

DOC = REPO / "docs" / "release-0.5.23.md"
PYTHON = REPO / ".venv-0.5.23" / "bin" / "python"
START, END = "<!-- upstream-tests-0.5.23 -->\n", "<!-- /upstream-tests-0.5.23 -->\n"
VERSION = "0.5.23"
UPSTREAM = "sgl-project/sglang"


class InputError(Exception):
    """Bad input, said in one line."""


def default_cache() -> Path:
    return cache_root() / f"upstream-tests-{VERSION}"


def read_sources(cache: Path) -> tuple[dict[str, str], dict[str, str]]:
    """({test path: upstream commit}, {path not run: why}) from ``cache/SOURCES.json``."""
    if not cache.is_dir():
        raise InputError(
            f"{cache}: no such folder; fetch upstream's test files into it first"
        )
    sources = cache / "SOURCES.json"
    try:
        data = json.loads(sources.read_text())
    except FileNotFoundError:
        raise InputError(f"{sources}: no such file") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{sources}: not JSON ({exc.msg}, line {exc.lineno})"
        ) from None
    files, not_run = data.get("files"), data.get("not_run", {})
    if not isinstance(files, dict) or not files or not isinstance(not_run, dict):
        raise InputError(
            f'{sources}: needs "files": {{path: commit}} (and "not_run" a dict)'
        )
    for path in files:
        if not (cache / path).is_file():
            raise InputError(f"{cache / path}: listed in SOURCES.json but not there")
    return files, not_run


def trees(work: Path) -> tuple[Path, Path]:
    """(released root, patched root), each a folder holding 0.5.23's ``sglang/``."""
    from sglang_eagle_sizing.cli import main as cli_main
    from sglang_eagle_sizing.smoke import cache_dir
    from sglang_eagle_sizing.smoke.runner import release_root

    released = release_root(cache_dir(), VERSION)
    patched = work / "patched"
    shutil.copytree(released / "sglang", patched / "sglang")
    if cli_main(["apply", "--quiet", str(patched / "sglang")]) != 0:
        raise SystemExit(f"apply failed on the {VERSION} release's sglang")
    return released, patched


#: a failure whose text holds one of these cannot pass on this machine, whatever the tree
CANNOT_RUN_HERE = {
    "libcuda.so": "needs CUDA",
    "common_ops": "needs CUDA",
    "HF_HUB_OFFLINE": "needs the network",
    "offline mode": "needs the network",
    "LocalEntryNotFoundError": "needs the network",
}


def cannot_run_here(text: str) -> str:
    return next((why for key, why in CANNOT_RUN_HERE.items() if key in text), "")


def cause(message: str | None, text: str) -> str:
    """The failure's first line; for a chained one (upstream's ``CustomTestCase`` re-raises
    every failure as ``retry() exceed ...``) the first ``E`` line, the original error's.
    """
    if "During handling of the above exception" in text:
        for line in text.splitlines():
            if line.startswith("E ") and line[1:].strip():
                return line[1:].strip()
    return first_line(message) or first_line(text)


def first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else ""


def outcomes(junit: Path, test_file: str) -> dict[str, tuple[str, str]]:
    """{test id: (outcome, first line of its failure)} from a pytest junit XML file."""
    module = test_file.removesuffix(".py").replace("/", ".")
    found = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        if not classname:  # the file did not import: pytest's collection error
            test_id = f"{test_file} (collection)"
        elif classname == module:
            test_id = f"{test_file}::{name}"
        elif classname.startswith(module + "."):
            test_id = f"{test_file}::{classname[len(module) + 1:]}::{name}"
        else:
            test_id = f"{classname}::{name}"
        outcome, detail = "pass", ""
        for tag, word in (
            ("failure", "fail"),
            ("error", "error"),
            ("skipped", "skipped"),
        ):
            element = case.find(tag)
            if element is not None:
                detail = cause(element.get("message"), element.text or "")
                why = cannot_run_here(f"{element.get('message')}\n{element.text}")
                outcome = f"{word} ({why} here)" if why and word != "skipped" else word
                break
        found[test_id] = (outcome, detail)
    return found


def run_file(cache: Path, test_file: str, root: Path, python: Path = PYTHON) -> dict:
    """Run one upstream test file on the tree at ``root``; its outcomes by test id."""
    with tempfile.TemporaryDirectory(prefix="upstream-junit-") as scratch:
        junit = Path(scratch) / "junit.xml"
        result = subprocess.run(
            [
                str(python),
                "-m",
                "pytest",
                "-q",
                "-rA",
                "-p",
                "no:cacheprovider",
                f"--junitxml={junit}",
                "-o",
                "junit_family=xunit1",
                test_file,
            ],
            cwd=cache,
            check=False,
            capture_output=True,
            text=True,
            # no Hub look-ups: a test that needs one fails at once, not after retries
            env={
                **os.environ,
                "PYTHONPATH": str(root),
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "SGLANG_TEST_MAX_RETRY": "0",
            },
        )
        if not junit.is_file():
            last = first_line("\n".join(reversed(result.stderr.splitlines())))
            return {
                f"{test_file} (not run)": ("error", last or f"exit {result.returncode}")
            }
        return outcomes(junit, test_file)


def cell(outcome: tuple[str, str] | None) -> str:
    if outcome is None:
        return "absent"
    word, detail = outcome
    return f"skipped ({detail})" if word == "skipped" and detail else word


def escape(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


def table(files: dict[str, str], not_run: dict[str, str], results: dict) -> str:
    """The section between the markers: the files and their commits, then every test."""
    lines = [
        START,
        (
            f"Upstream's unit tests ({UPSTREAM}, `test/registered/`) that import or exercise the "
            f"files the {VERSION} series changes, each run with `.venv-0.5.23`'s pytest on "
            f"{VERSION} as released and on the tree `apply` patched. The files are fetched from "
            "upstream into a cache outside this repository and not kept here. Written by "
            "`scripts/upstream_tests_table.py`."
        ),
        "",
        "| upstream file | commit | tests | pass on 0.5.23 | pass patched |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for path, commit in sorted(files.items()):
        released, patched = results[path]
        passed = [sum(o[0] == "pass" for o in r.values()) for r in (released, patched)]
        tests = len(set(released) | set(patched))
        lines.append(
            f"| `{path}` | `{commit[:12]}` | {tests} | {passed[0]} | {passed[1]} |"
        )
    for path, why in sorted(not_run.items()):
        lines.append(f"| `{path}` | | not run: {escape(why)} | | |")
    lines += [
        "",
        "| test | on 0.5.23 | patched | first line of the failure (both fail: 0.5.23's) |",
        "| --- | --- | --- | --- |",
    ]
    for path in sorted(files):
        released, patched = results[path]
        for test_id in sorted(set(released) | set(patched)):
            before, after = released.get(test_id), patched.get(test_id)
            detail = ""
            if cell(before) != cell(after):  # the failing side's first line
                failing = after if after and after[0] != "pass" else before
                detail = failing[1] if failing else ""
            elif before and before[0] != "pass":  # fails on both: 0.5.23's
                detail = before[1]
                if after and after[1] != before[1]:
                    detail += f"; patched: {after[1]}"
            name = test_id.removeprefix(path.rsplit("/", 1)[0] + "/")
            lines.append(
                f"| `{escape(name)}` | {cell(before)} | {cell(after)} | {escape(detail)} |"
            )
    return "\n".join(lines) + "\n" + END


def replaced(document: str, new: str, where: Path = DOC) -> str:
    if START not in document or END not in document:
        raise InputError(f"{where}: no {START.strip()} ... {END.strip()} markers")
    i, j = document.index(START), document.index(END) + len(END)
    return document[:i] + new + document[j:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "cache",
        nargs="?",
        type=Path,
        default=None,
        help=f"the fetched tests and SOURCES.json (default {default_cache()})",
    )
    parser.add_argument(
        "--print", action="store_true", help="print the table, write nothing"
    )
    args = parser.parse_args(argv)
    cache = (args.cache or default_cache()).resolve()
    try:
        files, not_run = read_sources(cache)
        document = "" if args.print else DOC.read_text()
        if not args.print:
            replaced(document, "")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="upstream-tests-") as work:
        released, patched = trees(Path(work))
        jobs = [(path, root) for path in sorted(files) for root in (released, patched)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            done = list(pool.map(lambda job: run_file(cache, *job), jobs))
    results = {
        path: (done[2 * i], done[2 * i + 1]) for i, path in enumerate(sorted(files))
    }
    text = table(files, not_run, results)
    if args.print:
        print(text, end="")
    else:
        DOC.write_text(replaced(document, text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
