#!/usr/bin/env bash
# Set up both environments, each reused once complete (a stamp file in it):
# - .venv: this package (editable, with test tools) and the real sglang==0.5.11 from PyPI,
#   under constraints.txt (reused while pyproject.toml and constraints.txt are unchanged);
# - .venv-0.5.23: sglang==0.5.23 from PyPI and pytest (scripts/setup-0.5.23.sh), the
#   interpreter `smoke` serves a 0.5.23 tree with.
# The two are independent and made at the same time: set-up is mostly downloading and
# unpacking wheels, which one pip does one wheel at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/disk.sh

stamp=.venv/.setup-complete
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exec bash scripts/setup-0.5.23.sh
fi

if ! bash scripts/setup-0.5.23.sh --check; then
    need_disk .venv 24  # both at once: 11 GB for .venv, 13 for .venv-0.5.23
fi
bash scripts/setup-0.5.23.sh &
other=$!
# a failure or Ctrl-C here stops the other half too
trap 'pkill -P "$other" 2>/dev/null; kill "$other" 2>/dev/null || true' EXIT

echo "setting up .venv (sglang==0.5.11 is about 9 GB; the first time takes several minutes)" >&2
need_disk .venv 11
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --no-cache-dir --upgrade pip
.venv/bin/python -m pip install --quiet --no-cache-dir -c constraints.txt -e ".[test]" "sglang==0.5.11"
echo "$want" > "$stamp"

wait "$other"
trap - EXIT
