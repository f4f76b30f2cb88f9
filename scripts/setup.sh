#!/usr/bin/env bash
# Set up both environments, each reused once complete (a stamp file in it):
# - .venv: this package (editable, with test tools) and the real sglang==0.5.11 from PyPI,
#   under constraints.txt (reused while pyproject.toml and constraints.txt are unchanged);
# - .venv-0.5.23: sglang==0.5.23 from PyPI and pytest (scripts/setup-0.5.23.sh), the
#   interpreter `smoke` serves a 0.5.23 tree with.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/disk.sh

stamp=.venv/.setup-complete
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if ! { [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }; then
    echo "setting up .venv (sglang==0.5.11 is about 9 GB; the first time takes several minutes)" >&2
    need_disk .venv 11
    python3 -m venv .venv
    .venv/bin/python -m pip install --quiet --no-cache-dir --upgrade pip
    .venv/bin/python -m pip install --quiet --no-cache-dir -c constraints.txt -e ".[test]" "sglang==0.5.11"
    echo "$want" > "$stamp"
fi

bash scripts/setup-0.5.23.sh
