#!/usr/bin/env bash
# Set up .venv: this package (editable, with test tools) and the real sglang==0.5.11 from PyPI,
# under constraints.txt. A .venv that is already complete for this pyproject.toml and
# constraints.txt is reused as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

stamp=.venv/.setup-complete
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    exit 0
fi

echo "setting up .venv (sglang==0.5.11 is about 9 GB; the first time takes several minutes)" >&2
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[test]" "sglang==0.5.11"
echo "$want" > "$stamp"
