"""Run test/test_faults.py striking at every write point, not the CI sample.

    .venv/bin/python scripts/faults_every_point.py [PYTEST ARGS]

CI (``.venv/bin/python -m pytest``) strikes, for each kind of write point (the primitive and
what it writes), its first and its last call: about a fifth to a quarter of the points (see
docs/development/robustness-tests.md). This runs the same tests with
``SGLANG_EAGLE_SIZING_FAULTS=every``: about 4 times the sample's strikes (1375 s against 730 s
on the shared machine, docs/development/robustness-tests.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    env = dict(os.environ, SGLANG_EAGLE_SIZING_FAULTS="every")
    command = [sys.executable, "-m", "pytest", "test/test_faults.py", "-q", *argv]
    return subprocess.run(command, cwd=REPO, env=env, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
