"""GPU memory of the hidden-state CUDA-graph buffers, per shared drafter/target pair, at SGLang's
default settings, before (pristine 0.5.11) and after the refactor, from
``sglang-eagle-sizing report DRAFT TARGET --json``. Prints the JSON's buffer rows."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _common import REPO, TOOL, machine, run

DATA = REPO / "test" / "data"


def pairs() -> list[Path]:
    return sorted(
        p
        for p in DATA.iterdir()
        if (p / "draft" / "config.json").is_file()
        and (p / "target" / "config.json").is_file()
    )


def main() -> None:
    print(f"machine: {machine()}")
    print(
        "bytes of each hidden-state CUDA-graph buffer: after (patched) / before (0.5.11)"
    )
    for pair in pairs():
        result = run(
            [*TOOL, "report", str(pair / "draft"), str(pair / "target"), "--json"]
        )
        if result.returncode != 0:
            print(
                f"{pair.name}: report failed: {result.stderr.strip().splitlines()[-1:]}"
            )
            continue
        sites = [s for s in json.loads(result.stdout)["sites"] if s["kind"] == "buffer"]
        after = sum(s["bytes"] or 0 for s in sites)
        before = sum(s["pristine"]["bytes"] or 0 for s in sites)
        print(f"== {pair.name}: total {after} / {before} bytes ({after - before:+d})")
        for s in sites:
            old = s["pristine"]
            print(
                f"  {s['worker']:16} {s['site']:62} {s['width']}x{s['buffer_rows']} "
                f"{s['dtype']}: {s['bytes']} / {old['bytes']} ({old['width']} {old['dtype']})"
                f"{'  DIFFERS' if s['differs_from_pristine'] else ''}"
                f"{'  error: ' + str(s['error'] or old['error']) if s['error'] or old['error'] else ''}"
            )


if __name__ == "__main__":
    main()
