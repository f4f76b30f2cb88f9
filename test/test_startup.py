"""Commands answer at once (issue 37): ``--help``, a usage error and a refused path load
nothing heavy (libcst, black, the engine, the rules), no module parses code at import, and
Ctrl-C at any instant of start-up prints one line and exits 130 with the tree as it was.

What a run imported, and when, is read from ``python -X importtime`` (one stderr line as each
import ends). No timings here: benchmark/startup.py measures them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO, git_status, make_checkout
from sglang_eagle_sizing import cli
from test_faults import small_copy

PACKAGE = Path(cli.__file__).resolve().parent
#: what start-up must not load: libcst and black, and the package's modules that load them
HEAVY = (
    "libcst",
    "black",
    "sglang_eagle_sizing.engine",
    "sglang_eagle_sizing.patch",
    "sglang_eagle_sizing.syntax",
    "sglang_eagle_sizing.series",
    "sglang_eagle_sizing.families.release_0_5_11.rules",
    "sglang_eagle_sizing.families.release_0_5_11.fork_test_slices",
    "sglang_eagle_sizing.families.release_0_5_23.rules",
)
COMMANDS = ("check", "diff", "apply", "revert", *cli.MODULE_COMMANDS)
#: the console script pip writes for ``[project.scripts]`` (what a user runs)
CONSOLE_SCRIPT = """\
import sys
from sglang_eagle_sizing.cli import main
if __name__ == '__main__':
    sys.argv[0] = sys.argv[0].removesuffix('.exe')
    sys.exit(main())
"""
IMPORT_TIME = "import time:"


def run_traced(args: list[str], cwd: Path, env: dict | None = None):
    """``python -X importtime -m sglang_eagle_sizing ARGS``: (exit code, the modules it
    imported, its stderr without the import lines)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "sglang_eagle_sizing", *args],
        cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=120,
    )
    lines = result.stderr.splitlines()
    modules = [line.rsplit("|", 1)[1].strip() for line in lines if line.startswith(IMPORT_TIME)]
    return result.returncode, modules, [line for line in lines if not line.startswith(IMPORT_TIME)]


def heavy(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    "args", [["--help"], *([c, "--help"] for c in COMMANDS)], ids=lambda a: " ".join(a)
)
def test_help_loads_nothing_heavy(args, tmp_path):
    code, modules, _ = run_traced(args, tmp_path)
    assert code == 0
    assert "sglang_eagle_sizing.cli" in modules  # the tool did run
    assert heavy(modules) == []


@pytest.mark.parametrize(
    "args",
    [
        ["apply", "--bogus"],
        ["apply", "missing"],
        ["apply", "not-sglang"],
        ["check", "not-sglang"],
        ["revert", "missing"],
        ["pr", "missing"],
        ["smoke", "not-sglang"],
        ["report", "--sglang", "missing"],
    ],
    ids=lambda a: " ".join(a),
)
def test_a_usage_error_or_a_refused_path_loads_nothing_heavy(args, tmp_path):
    (tmp_path / "not-sglang" / "srt").mkdir(parents=True)
    code, modules, err = run_traced(args, tmp_path)
    assert code == 2
    assert "error: " in err[-1], err
    if "--bogus" not in args:
        assert len(err) == 1 and err[0].startswith("error: "), err
    assert heavy(modules) == []


def test_a_heavy_import_at_start_up_is_seen(tmp_path):
    """The check above can fail: a copy of the package whose cli imports ``patch`` again at
    start-up (the mutant) loads libcst, black and the rules for ``--help``."""
    copy = tmp_path / "python" / "sglang_eagle_sizing"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    source = (copy / "cli.py").read_text()
    anchor = "from sglang_eagle_sizing.caches import CACHE_ENV\n"
    assert anchor in source
    (copy / "cli.py").write_text(source.replace(anchor, anchor + "from sglang_eagle_sizing import patch\n"))
    env = dict(os.environ, PYTHONPATH=str(copy.parent))
    code, modules, _ = run_traced(["--help"], tmp_path, env)
    assert code == 0
    assert {"libcst", "black", "sglang_eagle_sizing.patch"} <= set(heavy(modules))


POISON = """
import importlib, pkgutil, sys
import black, libcst


def parsed_at_import(*args, **kwargs):
    raise AssertionError("code parsed or formatted at import")


for name in ("parse_module", "parse_statement", "parse_expression"):
    setattr(libcst, name, parsed_at_import)
black.format_str = parsed_at_import
import sglang_eagle_sizing

names = [
    info.name
    for info in pkgutil.walk_packages(sglang_eagle_sizing.__path__, "sglang_eagle_sizing.")
    # not the fork's test files nor the stand-ins (package data), nor the command itself
    if not any(part in info.name for part in (".inserted_tests", ".standins", ".__main__"))
]
for name in names:
    importlib.import_module(name)
print(len(names), "modules")
"""


def test_no_module_parses_code_at_import():
    """Every module of the package imports with libcst's parsers and black's ``format_str``
    raising: what they compute from code is computed when first used."""
    result = subprocess.run(
        [sys.executable, "-c", POISON], capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[0]) > 50


# -- Ctrl-C ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fork(pristine, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("startup")
    return make_checkout(small_copy(pristine, root / "package" / "sglang"), root / "fork")


def entry(kind: str, folder: Path) -> list[str]:
    if kind == "python -m":
        return ["-m", "sglang_eagle_sizing"]
    script = folder / "sglang-eagle-sizing"
    script.write_text(CONSOLE_SCRIPT)
    return [str(script)]


def test_the_console_script_is_cli_main():
    """What ``CONSOLE_SCRIPT`` stands for: the entry point pyproject installs."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"sglang-eagle-sizing": "sglang_eagle_sizing.cli:main"}


#: The instants a SIGINT is sent, in start-up order: at once after the spawn, or when the
#: import of a module ends (its ``-X importtime`` line appears).
INSTANTS = {
    "right after spawn": None,
    "package imported (its first lines ran)": "sglang_eagle_sizing",
    "cli importing its modules": "argparse",
    "cli imported, main parsing": "sglang_eagle_sizing.cli",
    "apply loading libcst": "libcst",
    "apply loading the rules": "sglang_eagle_sizing.families.release_0_5_11.rules.aux_flag",
}


@pytest.mark.parametrize("kind", ["console script", "python -m"])
@pytest.mark.parametrize("instant", list(INSTANTS))
def test_ctrl_c_during_start_up_is_one_line_and_exit_130(fork, tmp_path, kind, instant):
    before = git_status(fork)
    env = dict(os.environ, SGLANG_EAGLE_SIZING_CACHE=str(tmp_path / "cache"))
    process = subprocess.Popen(
        [sys.executable, "-X", "importtime", *entry(kind, tmp_path), "apply", "."],
        cwd=fork, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # as from a terminal, whatever this test runs under (a background job ignores SIGINT)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen = []
    marker = INSTANTS[instant]
    while marker is not None:
        line = process.stderr.readline()
        assert line, f"never imported {marker}: {seen[-5:]}"
        seen.append(line)
        if line.startswith(IMPORT_TIME) and line.rsplit("|", 1)[1].strip() == marker:
            break
    process.send_signal(signal.SIGINT)
    out, rest = process.communicate(timeout=120)
    err = [line for line in (*seen, *rest.splitlines(True)) if not line.startswith(IMPORT_TIME)]
    assert out == ""
    if marker is None and process.returncode == -signal.SIGINT and not err:
        pass  # before Python installed any handler: SIGINT's default action (a shell: 130)
    else:
        assert process.returncode == 130, (process.returncode, err)
        assert len(err) == 1 and err[0].startswith("interrupted: "), err
        assert "nothing" in err[0]  # "nothing written" / "apply rolled back, nothing changed"
    assert git_status(fork) == before
    assert not (fork / ".git" / "sglang-eagle-sizing").exists()
