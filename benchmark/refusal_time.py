"""How long a server takes to tell its user that an EAGLE-3 drafter cannot serve its target,
SGLang 0.5.23 released beside patched, on a tiny DeepSeek-V3 (MLA) target served on the CPU.

The drafter's ids ``[1, 2, 5]`` on the 6-layer target name, by DeepSeek-V3's rule (``+ 1``
when the first id is 1), hidden state 6: the last layer's output, which ``DeepseekV2Model``
does not capture. The released tree starts, loads both models and fails at the first request
(``fc`` gets 2 of its 3 layers); the patched tree's server arguments refuse the drafter before
any process loads weights. Both run the same server command as ``smoke``'s
``deepseek-v3-eagle3-specforge-v2`` case (same models, flags, stand-ins), with the drafter's
ids changed; times are from ``launch_server`` to the failed request, or to the server's exit.

    .venv/bin/python benchmark/refusal_time.py [--workdir DIR]

About 4 minutes on two cores (one server start of each tree). Prints one table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

from sglang_eagle_sizing.families import AFTER_REFACTOR
from sglang_eagle_sizing.smoke import cache_dir
from sglang_eagle_sizing.smoke.class_cases import class_case
from sglang_eagle_sizing.smoke.models import DrafterSpec
from sglang_eagle_sizing.smoke.runner import (
    Models,
    release_root,
    server_command,
)
from sglang_eagle_sizing.smoke.server import (
    Server,
    ServerError,
    interpreter_for,
    libcuda_stub,
    server_env,
    standins_for,
)

IDS = (1, 2, 5)
TIMEOUT = 900.0


def patched_copy(release: Path, into: Path) -> Path:
    """The release's ``sglang/`` with the patch applied (``apply -q``), in ``into``."""
    if not (into / "sglang").is_dir():
        shutil.copytree(release / "sglang", into / "sglang")
        subprocess.run(
            [sys.executable, "-m", "sglang_eagle_sizing", "apply", "-q", str(into / "sglang")],
            check=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "python")},
        )
    return into


def time_to_failure(root: Path, case, built: Models, log: Path) -> tuple[float, str]:
    """(seconds from launch to the failure, what failed) for ``case`` served from ``root``."""
    family = AFTER_REFACTOR
    target_dir = built.target(case.target)
    drafter_dir = built.drafter(case.drafter, case.target)
    args, env = server_command(case, target_dir, drafter_dir)
    server = Server(
        root, args, log,
        server_env(root, libcuda_stub(cache_dir()), None, env, standins_for(family)),
        python=str(interpreter_for(family)),
    )
    start = time.monotonic()
    server.start()
    try:
        try:
            server.wait_ready(TIMEOUT)
        except ServerError:
            return time.monotonic() - start, f"refused at start-up: {_error(server)}"
        try:
            server.generate([[1, 2, 3, 4]], [4], timeout=TIMEOUT)
        except ServerError:
            return time.monotonic() - start, f"the first request failed: {_error(server)}"
        return time.monotonic() - start, "served (no failure)"
    finally:
        server.stop()


def _error(server: Server) -> str:
    """The last ``...Error: ...`` line of the server's log."""
    lines = [line for line in server.log_tail(10**6).splitlines() if "Error: " in line]
    return lines[-1].strip() if lines else "no error in the log"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keep models and logs here")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="refusal-time-"))
    case = class_case("deepseek-v3", "specforge", "v2")
    case = replace(case, drafter=DrafterSpec(kind="eagle3", aux_layer_ids=IDS))
    built = Models(workdir / "models")
    release = release_root(cache_dir(), AFTER_REFACTOR.known_version)
    patched = patched_copy(release, workdir / "patched")
    rows = []
    for label, root in (("released", release), ("patched", patched)):
        seconds, what = time_to_failure(root, case, built, workdir / f"{label}.log")
        rows.append((label, seconds, what))
    print(f"DeepSeek-V3 target (6 layers, tiny), EAGLE-3 drafter eagle_config ids {list(IDS)}")
    print("| tree | from launch_server to the failure | what failed |")
    print("| --- | ---: | --- |")
    for label, seconds, what in rows:
        print(f"| {label} | {seconds:.0f} s | {' '.join(what.split())[:300]} |")
    print(f"ratio released / patched: {rows[0][1] / rows[1][1]:.1f}")


if __name__ == "__main__":
    main()
