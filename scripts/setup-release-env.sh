#!/usr/bin/env bash
# Set up .venv-<release>: SGLang <release> from PyPI under its own pins (its wheel's
# Requires-Dist) and pytest, the environment scripts/releases_table.py runs that release's
# fork tests in (and every release with the same torch and transformers pins: .venv-0.5.20
# serves 0.5.18-0.5.21). Not part of CI or scripts/setup.sh: about 9 GB each.
#
#     bash scripts/setup-release-env.sh 0.5.20
#
# Two requirements are not taken as the wheel states them:
# - cuda-tile: a placeholder on PyPI that downloads its real wheel from another host at
#   install time (it fails here); nothing the fork tests import needs it;
# - torch: from PyPI itself, not from a local wheel folder pip may be configured with (a
#   CPU build there does not load PyPI's torchvision, which the model files import).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/disk.sh

release=${1:?usage: $0 RELEASE (for example 0.5.20)}
venv=.venv-$release
stamp=$venv/.setup-complete
if [ -f "$stamp" ]; then
    exit 0
fi
need_disk "$venv" 12

requirements=$(mktemp)
trap 'rm -f "$requirements"' EXIT
.venv/bin/python - "$release" > "$requirements" <<'EOF'
import sys, zipfile
from sglang_eagle_sizing.wheel import cached_release_wheel

with zipfile.ZipFile(cached_release_wheel(sys.argv[1])) as wheel:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    for line in wheel.read(name).decode().splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        requirement = line.removeprefix("Requires-Dist: ")
        if "extra ==" in requirement or requirement.startswith("cuda-tile"):
            continue
        print(requirement)
EOF
torch=$(grep -E '^torch==' "$requirements")

echo "setting up $venv (SGLang $release under its own pins, about 9 GB)" >&2
python3 -m venv "$venv"
"$venv"/bin/python -m pip install --quiet --no-cache-dir --upgrade pip
env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null \
    "$venv"/bin/python -m pip install --quiet --no-cache-dir "$torch"
"$venv"/bin/python -m pip install --quiet --no-cache-dir -r "$requirements" "pytest>=8"
"$venv"/bin/python -m pip install --quiet --no-cache-dir --no-deps "sglang==$release"
date -u +%FT%TZ > "$stamp"
