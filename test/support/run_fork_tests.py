"""Run the fork's CPU test files in one process:

    python3 run_fork_tests.py <test file or folder>... [-- unittest arguments]

Each file is loaded as ``python3 <file>`` loads it (its folder first on ``sys.path``, its own
module, not ``__main__``, so its ``unittest.main()`` does not run) and all their tests run in
one ``unittest`` suite, with unittest's usual output (``FAIL: test_x (module.Class.test_x)``,
``Ran N tests``): the import of SGLang's worker modules is paid once, not once per file. A
folder stands for its ``test_*.py`` files, in name order. A file that does not load stops
the run before any test, as ``python3 <file>`` would.

The mutation runs (``mutants.run_test_file``) and ``older_release_compat.py`` use it.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import unittest
from pathlib import Path
from types import ModuleType


def test_files(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for path in map(Path, paths):
        path = path.resolve()
        files.extend(sorted(path.glob("test_*.py")) if path.is_dir() else [path])
    return files


def load(files: list[Path]) -> list[ModuleType]:
    """Each file as its own module (named by its file), its folder first on the path."""
    modules = []
    for file in files:
        folder = str(file.parent)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        spec = importlib.util.spec_from_file_location(file.stem, file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[file.stem] = module
        spec.loader.exec_module(module)
        modules.append(module)
    return modules


def run(modules: list[ModuleType], argv: list[str] | None = None) -> int:
    """unittest's runner on the tests of every module, SGLang's log at ERROR as each
    file's ``__main__`` sets it: 0 when all pass."""
    logging.getLogger("sglang").setLevel(logging.ERROR)
    suite = unittest.TestSuite(
        unittest.defaultTestLoader.loadTestsFromModule(m) for m in modules
    )
    verbosity = 2 if argv and ("-v" in argv or "--verbose" in argv) else 1
    result = unittest.TextTestRunner(verbosity=verbosity).run(suite)
    return 0 if result.wasSuccessful() else 1


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], argv[index + 1 :]
    return argv, []


if __name__ == "__main__":
    paths, unittest_args = split_argv(sys.argv[1:])
    sys.exit(run(load(test_files(paths)), unittest_args))
