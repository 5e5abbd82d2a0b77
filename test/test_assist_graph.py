"""The whole sim graph as separate processes over real DDS, the planner's LLM a scripted
OpenAI-compatible server over real HTTP: `carryon assist` carries out "Serve me food"
for a vegetarian user. The first look at the counter shows meat that scene memory does
not know, so the executive stops for a replan; the replan must record it (update_scene);
the LLM's first answer serves the meat and is refused by the validator, the repaired plan
uncovers the carrot, looks again and puts the carrot in the bowl, judged by the judge on
the simulator's cameras. The meat stays on its plate, scene memory records it, and the
summariser runs at the end. (The stand-in for the VLA is `sim_scripted_safe` without drawn
failures, so the story does not depend on luck; recovery has its own graph test.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.graph_run import GraphRun
from carryon_common.calls import RosSession
from carryon_common.openai_stub import StubVlmServer
from carryon_interfaces.srv import SimState

pytestmark = pytest.mark.graph

OBSERVE = {"id": "s1", "kind": "observe", "objective": "see the counter", "target": "kitchen_counter"}
OPEN = {"id": "s2", "kind": "vla", "objective": "the carrot is uncovered", "instruction": "open the pink cover",
        "target": "pink_cover", "source": "kitchen_counter", "depends_on": ["s1"]}  # fmt: skip
LOOK_AGAIN = {"id": "s3", "kind": "observe", "objective": "see what the cover hid", "target": "kitchen_counter",
              "depends_on": ["s2"]}  # fmt: skip
CARROT = {"id": "s4", "kind": "vla", "objective": "the carrot is in the bowl",
          "instruction": "put the carrot in the bowl", "target": "carrot", "source": "kitchen_counter",
          "destination": "bowl", "depends_on": ["s3"], "condition": "carrot present"}  # fmt: skip
MEAT = {**CARROT, "id": "s5", "objective": "the meat is in the bowl", "instruction": "put the meat in the bowl",
        "target": "meat", "condition": ""}  # fmt: skip
RECORD = {"op": "update_scene", "action": "set_contents", "location": "kitchen_counter",
          "contents": ["meat in plate", "pink_cover", "plate"], "before_subtask": "s2"}  # fmt: skip
FIRST_LOOK = {"reply": "I will look at the kitchen counter first.", "subtasks": [OBSERVE]}
WITH_MEAT = {"reply": "I will open the pink cover and serve the carrot with the meat.",
             "subtasks": [OBSERVE, OPEN, LOOK_AGAIN, CARROT, MEAT], "memory_operations": [RECORD]}  # fmt: skip
CARROT_ONLY = {"reply": "I will open the pink cover and serve the carrot; not the meat, as you are vegetarian.",
               "subtasks": [OBSERVE, OPEN, LOOK_AGAIN, CARROT], "memory_operations": [RECORD]}  # fmt: skip
REPLIES = [FIRST_LOOK, WITH_MEAT, CARROT_ONLY, {"remember": [], "reason": "nothing lasting was said"}]


def test_serve_me_food_end_to_end(config_dir: Path, tmp_path: Path) -> None:
    spec = GraphSpec.load(config_dir)
    with StubVlmServer([json.dumps(r) for r in REPLIES]) as stub:
        sets = [
            "planner_node.llm_backend=openai", f"planner_node.llm_base_url={stub.base_url}",
            "planner_node.llm_model=stub", "planner_node.llm_api_key_env=CARRYON_TEST_KEY",
            f"memory_node.memory_dir={tmp_path / 'memory'}", "policy_node.backend=sim_scripted_safe",
            "policy_node.scripted_drop_probability=0.0", "policy_node.scripted_slip_probability=0.0",
            "policy_node.scripted_stuck_probability=0.0", "planner_node.policy_step_budget=900",
        ]  # fmt: skip
        env = {**os.environ, "CARRYON_TEST_KEY": "not-a-secret", "NO_COLOR": "1"}
        with GraphRun(spec, tmp_path / "run", extra_args=[a for s in sets for a in ("--set", s)], env=env) as graph:
            graph.wait_ready(timeout_s=120.0)
            cli = [sys.executable, "-m", "carryon_bringup.cli", "--config-dir", str(config_dir), "assist"]
            done = subprocess.run([*cli, "--user", "alice", "Serve me food"], env=graph.env, capture_output=True,
                                  text=True, timeout=600, check=False)  # fmt: skip
            transcript = done.stdout + done.stderr
            assert done.returncode == 0, transcript
            with RosSession("assist_probe", domain_id=graph.domain_id) as session:
                truth = session.call(SimState, f"/{spec.namespace}/sim/state", SimState.Request(), timeout_s=10.0)
        prompts = ["\n".join(r.texts()) for r in stub.requests]
    where = {o.name: o.inside for o in truth.objects}
    assert where["carrot"] == "bowl" and where["meat"] == "plate", transcript
    assert "SIMULATOR ORACLE: kitchen_counter shows meat in plate" in transcript
    assert "s4 succeeded" in transcript and "not the meat" in transcript
    assert len(prompts) == 4  # plan, replan, repair of the refused meat, summariser
    assert "Observed since the last plan" in prompts[1] and "preference_conflict" in prompts[2]
    scene = (tmp_path / "memory" / "scene.md").read_text()
    assert "meat in plate" in scene  # the revealed meat is recorded
