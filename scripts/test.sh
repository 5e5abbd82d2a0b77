#!/usr/bin/env bash
# The test command (`make test`): lint, types, generated-doc checks, then pytest with
# unit, in-process node and multi-process graph tests. Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
# shellcheck disable=SC1091
. ./env.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST   # tests pick their own ROS_DOMAIN_ID per run
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

lint_only=false
if [ "${1:-}" = "--lint-only" ]; then lint_only=true; shift; fi

step "ruff (lint + format)"
ruff check .
ruff format --check .

step "mypy (every core/ module and the simulation harness, strict)"
MYPYPATH="$(ls -d carryon_*/ | grep -v interfaces | tr -d / | paste -sd:)" \
  mypy $(for d in carryon_*/carryon_*/core; do printf -- '-p %s.core ' "$(basename "$(dirname "$d")")"; done) \
  -p carryon_sim.harness

step "generated references are up to date"
python scripts/gen_docs.py --check

step "Dockerfile lint (hadolint)"
hadolint docker/Dockerfile

$lint_only && exit 0

step "pytest"
pytest "$@"
