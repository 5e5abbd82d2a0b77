#!/usr/bin/env bash
# `make demo`: the simulated assistant, zero configuration (no robot, GPU, network or key).
#
# A remembered vegetarian user (alice) says "Serve me food". The whole graph runs as
# separate processes over DDS: the planner plans with her memory, looks at the counter,
# finds meat it did not know about and replans (recording it in scene memory); the
# validator refuses to serve her the meat (an LLM that never proposes it says it is left
# out); the arm opens the pink cover, looks again and carries the carrot to the bowl,
# every chunk checked by the shield (it steers around the bottle); the carrot is dropped
# just after it is picked up (an injected perturbation), the judge calls the failure,
# recovery re-grasps through the shield and the instruction resumes.
#
# STAND-INS (said again in the banner): the VLA is a SCRIPTED stand-in (sim_scripted_safe);
# the planner's replies are SCRIPTED (config/planner/demo_script.yaml, NOT AN LLM; the
# validator, repair loop and executive are real); the drop is injected. Perception (observe,
# shield, judge, recovery) is from the rendered colour + depth. Use a real LLM: `make demo LLM=local`
# (the offline model, after scripts/setup_llm.sh), or CARRYON_DEMO_LLM_URL=http://host:port/v1
# CARRYON_DEMO_LLM_MODEL=name (key in $OPENAI_API_KEY) make demo.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck disable=SC1091
. ./env.sh
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
# This run's own DDS domain (1..101), reserved with a lock like the tests' and benchmarks'.
if [ -z "${ROS_DOMAIN_ID:-}" ]; then
  for candidate in $(shuf -i 1-101); do
    exec 9>"${TMPDIR:-/tmp}/carryon-ros-domain-$candidate.lock"
    if flock -n 9; then export ROS_DOMAIN_ID=$candidate; break; fi
  done
fi
RUN_DIR="$ROOT/runs/$(date +%Y%m%d-%H%M%S)-demo"
mkdir -p "$RUN_DIR"
TRANSCRIPT="$RUN_DIR/transcript.txt"
bold() { printf '\n\033[1m%s\033[0m\n' "$*" | tee -a "$TRANSCRIPT"; }
operator() {
  printf '\n\033[1;36m$ %s\033[0m\n' "$*" | tee -a "$TRANSCRIPT"
  "$@" 2>&1 | tee -a "$TRANSCRIPT"
  return "${PIPESTATUS[0]}"
}

PLANNER=(--set planner_node.llm_backend=scripted)
STAND_INS="the planner's replies (below), the injected drop."
PLANNER_LINE="SCRIPTED replies (config/planner/demo_script.yaml), NOT AN LLM"
if [ "${LLM:-}" = "local" ]; then  # make demo LLM=local
  if ! python -c "import llama_cpp.server, uvicorn" 2>/dev/null; then
    echo "LLM=local needs the offline model server: run \`bash scripts/setup_llm.sh\` first (6-16 min once)" >&2
    exit 2
  fi
  # On 2 cores the rest of the graph yields to the model (graph.yaml others_nice): a plan
  # takes 15-30 s; a request may still take up to 10 min before it counts as failed.
  PLANNER=(--set planner_node.llm_backend=local --set planner_node.llm_timeout_s=600)
  PLANNER_LINE="the offline model (llm_server_node: Qwen2.5-Coder on this CPU; weak, slow plans)"
  STAND_INS="the injected drop. The planner is the LLM."
elif [ -n "${LLM:-}" ]; then
  echo "LLM=$LLM: unknown; LLM=local (the offline model), or CARRYON_DEMO_LLM_URL for a server" >&2
  exit 2
elif [ -n "${CARRYON_DEMO_LLM_URL:-}" ]; then
  PLANNER=(--set planner_node.llm_backend=openai --set "planner_node.llm_base_url=$CARRYON_DEMO_LLM_URL"
           --set "planner_node.llm_model=${CARRYON_DEMO_LLM_MODEL:-}")
  PLANNER_LINE="the LLM at $CARRYON_DEMO_LLM_URL"
  STAND_INS="the injected drop. The planner is the LLM."
fi

cat <<BANNER | tee -a "$TRANSCRIPT"
+--------------------------------------------------------------------------------+
| CarryOn demo: "Serve me food" for alice (vegetarian), in simulation            |
| Real: separate ROS 2 processes over DDS, memory files, the plan validator and  |
| repair loop, the executive, perception from the rendered RGB-D (no simulator   |
| masks or truth): observe, the geometric shield, the judge and recovery on it;  |
| MuJoCo.                                                                        |
| STAND-INS: the VLA is a SCRIPTED stand-in (sim_scripted_safe; it reads the     |
| simulator's object poses), $(printf '%-52s' "$STAND_INS")|
+--------------------------------------------------------------------------------+
Planner: $PLANNER_LINE
BANNER

bold "Starting the graph: carryon up --profile sim   (ROS_DOMAIN_ID=$ROS_DOMAIN_ID, run folder $RUN_DIR)"
carryon up --profile sim --run-dir "$RUN_DIR" "${PLANNER[@]}" \
  --set "memory_node.memory_dir=$RUN_DIR/memory" \
  --set policy_node.backend=sim_scripted_safe \
  --set policy_node.scripted_drop_probability=0.0 --set policy_node.scripted_slip_probability=0.0 \
  --set policy_node.scripted_stuck_probability=0.0 \
  --set planner_node.policy_step_budget=1500 --set judge_node.stuck_timeout_s=12.0 \
  > "$RUN_DIR/launcher.out" 2>&1 &
UP_PID=$!
DROP_PID=""
stop_graph() {
  [ -n "$DROP_PID" ] && kill "$DROP_PID" 2>/dev/null
  if kill -0 "$UP_PID" 2>/dev/null; then
    kill -INT "$UP_PID" 2>/dev/null
    wait "$UP_PID" 2>/dev/null
  fi
}
trap 'stop_graph; exit 130' INT TERM

for _ in $(seq 1 1200); do
  grep -q "node(s) ready after" "$RUN_DIR/launcher.out" 2>/dev/null && break
  kill -0 "$UP_PID" 2>/dev/null || { echo "carryon up exited early; see $RUN_DIR/logs" >&2; exit 1; }
  sleep 0.1
done

if [ "${LLM:-}" = "local" ]; then
  bold "Waiting for the offline model to read the planner's rules once (about a minute on 2 cores; then plans reuse them)"
  for _ in $(seq 1 6000); do
    grep -q "model server warmed" "$RUN_DIR/logs/planner_node.log" 2>/dev/null && break
    kill -0 "$UP_PID" 2>/dev/null || break
    sleep 0.1
  done
fi
operator carryon status
operator carryon memory show --user alice
bold "Injecting a perturbation: the carrot will be dropped just after it is picked up (carryon perturb)"
# $! must be carryon perturb itself (not the last command of a pipeline), so that stop_graph
# ends it when the carrot was never lifted.
carryon perturb drop --when-lifted carrot --lift-m 0.05 > >(sed 's/^/  [perturbation] /' | tee -a "$TRANSCRIPT") 2>&1 &
DROP_PID=$!
operator carryon assist --user alice "Serve me food"
CODE=$?
operator carryon memory show
bold "Recovery attempts recorded for reflection: $RUN_DIR/recovery_attempts.jsonl"
bold "Stopping the graph (Ctrl-C)"
stop_graph
trap - INT TERM
operator carryon report "$RUN_DIR"
operator carryon audit verify "$RUN_DIR/audit.jsonl"
# Every event of the story, looked up in the audit log and this transcript.
operator python -m carryon_bringup.story "$RUN_DIR"
STORY=$?
[ "$CODE" = 0 ] && [ "$STORY" != 0 ] && CODE=$STORY
cat <<DONE | tee -a "$TRANSCRIPT"

Done ($([ "$CODE" = 0 ] && echo 'served, the whole story told' || echo "exit code $CODE")). In $RUN_DIR:
  transcript.txt       this transcript
  report.md / .png     tool path with the shield's decisions, subtask timeline, metrics.json
  audit.jsonl          every decision, hash-chained (carryon audit verify)
  bag/                 rosbag2 (MCAP) of the run: Foxglove, ros2 bag play, carryon replay
  story.json           which events of the story happened (python -m carryon_bringup.story)
  recovery_attempts.jsonl, logs/, resolved_config.yaml, events.jsonl
DONE
exit "$CODE"
