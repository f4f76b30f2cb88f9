#!/usr/bin/env bash
# Run every benchmark and print its figures (recorded results: docs/development/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
echo "### classmethods";  "$PY" benchmark/classmethods.py
echo "### cli speed";     "$PY" benchmark/cli_speed.py
echo "### startup";       "$PY" benchmark/startup.py
echo "### graph memory";  "$PY" benchmark/graph_memory.py
echo "### draft dtype";   "$PY" benchmark/draft_dtype.py
