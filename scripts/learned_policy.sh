#!/usr/bin/env bash
# The learned policy (issue 21), reproducible from a seed, in the LeRobot extra's virtualenv
# (.venv-lerobot, built here when missing: see scripts/test_extra.sh):
#   record    expert demonstrations -> a LeRobotDataset    (~11 min on 2 cores for 200 episodes)
#   train     LeRobot ACT on them -> the checkpoint        (~46 min on 2 cores for 3500 steps)
#   evaluate  the checkpoint alone on seeded episodes      (what `carryon bench learned` runs)
#   all       record, then train
#   from-bag  recorder_node bags -> a LeRobotDataset (python -m carryon_policy.bag_dataset --help)
# Everything is cached outside git under $CARRYON_CACHE_DIR (default ~/.cache/carryon):
#   datasets/food_serving_demos-s<SEED>-n<EPISODES>/   policies/act_food_serving-s<SEED>/
# Environment: SEED (0), EPISODES (200), STEPS (3500), DEVICE (cpu). Extra arguments go to
# the Python module of the step (python -m carryon_sim.harness.learned.<step> --help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STEP="${1:?usage: scripts/learned_policy.sh record|train|evaluate|all|from-bag [args]}"
shift
SEED="${SEED:-0}"; EPISODES="${EPISODES:-200}"; STEPS="${STEPS:-3500}"; DEVICE="${DEVICE:-cpu}"
CACHE="${CARRYON_CACHE_DIR:-$HOME/.cache/carryon}"
DATASET="$CACHE/datasets/food_serving_demos-s$SEED-n$EPISODES"
POLICY="$CACHE/policies/act_food_serving-s$SEED"
VENV="${LEROBOT_VENV:-$ROOT/.venv-lerobot}"
LEROBOT_VENV="$VENV" bash "$ROOT/scripts/test_extra.sh" lerobot --install-only
export MUJOCO_GL="${MUJOCO_GL:-egl}" HF_HUB_OFFLINE=1 HF_DATASETS_CACHE="$CACHE/hf-datasets"
PYTHONPATH="$VENV/carryon-metadata:$(printf '%s:' "$ROOT"/carryon_*/ | sed 's|/:|:|g; s|:$||')"  # metadata: test_extra.sh
export PYTHONPATH
run() { "$VENV/bin/python" -m "carryon_sim.harness.learned.$1" "${@:2}"; }
record() {
  if [ -d "$DATASET" ]; then echo "demonstrations exist: $DATASET (delete it to record again)"; return; fi
  run record --out "$DATASET" --episodes "$EPISODES" --seed "$SEED" "$@"
}
train() { run train --dataset "$DATASET" --out "$POLICY" --steps "$STEPS" --seed "$SEED" --device "$DEVICE" "$@"; }
case "$STEP" in
  record) record "$@" ;;
  train) train "$@" ;;
  evaluate) run evaluate --checkpoint "$POLICY" "$@" ;;
  all) record; train "$@" ;;
  from-bag) "$VENV/bin/python" -m carryon_policy.bag_dataset "$@" ;;
  *) echo "unknown step '$STEP' (record, train, evaluate, all, from-bag)" >&2; exit 2 ;;
esac
