#!/usr/bin/env bash
# Set up .venv-0.5.23: SGLang 0.5.23 from PyPI (torch 2.14.1, transformers 5.19.0) and pytest,
# from requirements-0.5.23.txt. `smoke` serves a 0.5.23 tree with this interpreter
# (smoke/server.py: interpreter_for). A .venv-0.5.23 already complete for that file is reused
# as it is. Called by scripts/setup.sh; runs alone too. --check: exit 0 when it is complete, 1
# when it needs set-up, and do nothing else.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/disk.sh

venv=.venv-0.5.23
stamp=$venv/.setup-complete
want=$(sha256sum requirements-0.5.23.txt | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi
if [ "${1:-}" = --check ]; then
    exit 1
fi

echo "setting up $venv (sglang==0.5.23 is about 11 GB; the first time takes several minutes)" >&2
need_disk "$venv" 13
python3 -m venv "$venv"
"$venv"/bin/python -m pip install --quiet --no-cache-dir --upgrade pip
"$venv"/bin/python -m pip install --quiet --no-cache-dir -r requirements-0.5.23.txt
echo "$want" > "$stamp"
