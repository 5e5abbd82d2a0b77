"""The whole sim graph as separate processes over real DDS, the planner's LLM a scripted
OpenAI-compatible server over real HTTP: `carryon assist` carries out "Serve me food"
for a vegetarian user. The first look at the counter shows meat that scene memory does
not know, so the executive stops for a replan; the replan must record it (update_scene);
the LLM's first answer serves the meat and is refused by the validator, the repaired plan
uncovers the carrot, looks again and puts the carrot in the bowl, judged by the judge on
the simulator's cameras. The meat stays on its plate, scene memory records it, and the
summariser runs at the end. A second run drops the carrot on the way (recovery). The
stand-in for the VLA is `sim_scripted_safe` without drawn failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ament_index_python.packages import get_package_share_directory
from rosbags.rosbag2 import Reader

from carryon_bringup.core.graph import GraphSpec
from carryon_bringup.core.recorder import typestore_for
from carryon_bringup.graph_run import GraphRun
from carryon_common.calls import GraphUnreachable, RosSession
from carryon_common.core.audit import verify
from carryon_common.core.scripted_llm import ScriptedLlm
from carryon_interfaces.srv import SimState
from carryon_sim.harness.fakes.openai_server import StubVlmServer

# The whole story on a 2-core machine: start-up, two plans and a repair, the cover, and the
# carrot with up to three recoveries (each a re-grasp through the shield) takes 4-6 minutes.
pytestmark = [pytest.mark.graph, pytest.mark.timeout(600)]

SCRIPT = Path(__file__).resolve().parents[1] / "config" / "planner" / "demo_script.yaml"


def replies(*names: str) -> list[str]:
    """The demo's scripted replies (config/planner/demo_script.yaml), in story order."""
    entries = {e.name: e.reply for e in ScriptedLlm(SCRIPT).script.replies}
    return [json.dumps(entries[n]) for n in names]


@dataclass
class Story:
    code: int
    transcript: str
    where: dict[str, str]  # object -> container it is in (simulator ground truth)
    prompts: list[str]
    dropped: str
    run: Path


def tell(config_dir: Path, tmp_path: Path, *, drop: bool, stuck_s: float = 12.0, recoveries: int = 2) -> Story:
    spec = GraphSpec.load(config_dir)
    with StubVlmServer(replies("first_look", "with_meat", "summary")) as stub:
        sets = [
            "planner_node.llm_backend=openai", f"planner_node.llm_base_url={stub.base_url}",
            "planner_node.llm_model=stub", "planner_node.llm_api_key_env=CARRYON_TEST_KEY",
            f"memory_node.memory_dir={tmp_path / 'memory'}", "policy_node.backend=sim_scripted_safe",
            "policy_node.scripted_drop_probability=0.0", "policy_node.scripted_slip_probability=0.0",
            "policy_node.scripted_stuck_probability=0.0", "planner_node.policy_step_budget=1500",
            f"judge_node.stuck_timeout_s={stuck_s}", f"planner_node.max_recoveries={recoveries}",
        ]  # fmt: skip
        env = {**os.environ, "CARRYON_TEST_KEY": "not-a-secret", "NO_COLOR": "1"}
        with GraphRun(spec, tmp_path / "run", extra_args=[a for s in sets for a in ("--set", s)], env=env) as graph:
            graph.wait_ready(timeout_s=120.0)
            cli = [sys.executable, "-m", "carryon_bringup.cli", "--config-dir", str(config_dir)]
            dropper = None
            if drop:  # the carrot is dropped while carried to the bowl (an injected perturbation, as in the paper)
                command = [*cli, "perturb", "drop", "--when-lifted", "carrot", "--lift-m", "0.04", "--near", "bowl",
                           "0.12"]  # fmt: skip
                dropper = subprocess.Popen(command, env=graph.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True)  # fmt: skip
            try:
                done = subprocess.run([*cli, "assist", "--user", "alice", "Serve me food"], env=graph.env,
                                      capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
            finally:
                dropped = ""
                if dropper is not None:
                    dropper.terminate()
                    dropped = dropper.communicate(timeout=30)[0]
            truth = read_truth(graph, spec, done)
        prompts = ["\n".join(r.texts()) for r in stub.requests]
    where = {o.name: o.inside for o in truth.objects}
    return Story(done.returncode, done.stdout + done.stderr, where, prompts, dropped, tmp_path / "run")


def read_truth(graph: GraphRun, spec: GraphSpec, done: subprocess.CompletedProcess[str]) -> Any:
    """The simulator's state after the story (the evaluation oracle). The test process joins
    the DDS domain only here, as a brand-new participant on a loaded machine: it may take a
    while to discover sim_node (resend: reading the state is idempotent). When it cannot, the
    failure says what the launcher saw (a node that died or was restarted) and how the story
    ended."""
    try:
        with RosSession("assist_probe", domain_id=graph.domain_id) as session:
            return session.call(SimState, f"/{spec.namespace}/sim/state", SimState.Request(), timeout_s=10.0,
                                wait_s=45.0, resend_s=5.0)  # fmt: skip
    except GraphUnreachable as exc:
        events = [e for e in graph.events() if e.get("event") != "ready"]
        pytest.fail(f"{exc}\nlauncher events: {events}\nlauncher output (tail):\n{graph.output()[-4000:]}\n"
                    f"assist exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")  # fmt: skip


def audit_kinds(run: Path) -> tuple[set[str], list[dict[str, Any]]]:
    audit = run / "audit.jsonl"
    assert verify(audit).ok
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    return {e["kind"] for e in entries}, entries


def test_serve_me_food_end_to_end(config_dir: Path, tmp_path: Path) -> None:
    """Planning, replanning, the validator's refusal and the memory writes are the same in
    every run. The arm's part is not: the scripted stand-in's detours round the bottle
    under the shield, on a loaded 2-core machine, sometimes stall past the judge's stuck
    timeout and the recoveries, and where it sets the cover down decides what the second
    look sees (set down on the plate's rim, the cover hides the meat: the executive rightly
    replans, and the stub has no plan for that). The outcome must then agree with the
    simulator."""
    story = tell(config_dir, tmp_path, drop=False, stuck_s=20.0, recoveries=3)
    transcript = story.transcript
    assert "kitchen_counter shows meat in plate" in transcript, transcript  # perception_node, no simulator truth
    assert "Left out because of your preferences: meat" in transcript  # mended: no LLM round for it
    assert "Observed since the last plan" in story.prompts[1]
    if transcript.count("planning again with what was observed") == 1:
        assert len(story.prompts) == 3, transcript  # plan, replan (the meat dropped by the planner), summariser
    else:  # the second look (after the arm moved the cover) differed from memory: a second replan
        assert "s3 succeeded" in transcript and "Observed since the last plan" in story.prompts[2], transcript
        assert story.code != 0, transcript
    scene = (tmp_path / "memory" / "scene.md").read_text()
    assert "meat in plate" in scene  # the revealed meat is recorded
    assert story.where["meat"] == "plate"  # and never served
    # Every decision of the story is in the run's audit log, and its hash chain holds.
    kinds, entries = audit_kinds(story.run)
    assert {"plan", "plan.validation", "subtask", "plan.end", "memory.change"} <= kinds, kinds
    assert "forged" not in kinds, [e for e in entries if e["kind"] == "forged"]  # every decision verified
    assert any("preference_conflict" in e["data"].get("message", "") for e in entries)
    if story.code == 0:
        assert story.where["carrot"] == "bowl" and "s4 succeeded" in transcript, transcript
        assert "carrot in bowl" in scene  # the judged move is recorded
    else:
        assert story.where["carrot"] != "bowl" and "failed:" in transcript, transcript


def test_a_dropped_carrot_is_recovered_through_the_shield(config_dir: Path, tmp_path: Path) -> None:
    """The same story with the carrot dropped near the bowl: the judge calls the failure,
    recovery_node runs the base skill with every motion decided by the shield, and the
    instruction resumes. Whether the stand-in and the skill then get the carrot into the
    bowl varies from run to run (bench recovery measures how often); the outcome must
    agree with the simulator either way."""
    story = tell(config_dir, tmp_path, drop=True)
    transcript = story.transcript
    record = story.run / "recovery_attempts.jsonl"  # recovery_node's own record of each attempt
    attempts = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    s4 = [a for a in attempts if a["attempt_id"].startswith("s4-")]
    if not s4:  # the dropped carrot fell into the bowl: nothing to recover
        assert "perturbation: drop applied" in story.dropped and story.code == 0, transcript
        assert story.where["carrot"] == "bowl"
        return
    # The carrot was dropped, or the stand-in got stuck on its way past the bottle before
    # it could be: either way the judge called the failure and recovery ran.
    assert "s4 recovering: recovery attempt" in transcript and s4[0]["operations"][0]["op"] == "relocalize"
    # Recovery chunks (ids from 2e9) reached the driver only through the shield's decisions.
    store = typestore_for([Path(get_package_share_directory("carryon_interfaces"))])
    with Reader(story.run / "bag") as bag:
        events = [c for c in bag.connections if c.topic == "/carryon/shield/events"]
        decided = [store.deserialize_cdr(raw, c.msgtype) for c, _t, raw in bag.messages(connections=events)]
    recovery = [e for e in decided if e.chunk_id >= 2_000_000_000 and e.subtask_id == "s4"]
    assert len(recovery) >= 3 and sum(e.released_steps for e in recovery) > 0
    kinds, _ = audit_kinds(story.run)
    assert "recovery" in kinds
    # The last attempt is recorded with how the task ended (true only when s4 succeeded after it).
    assert s4[-1]["task_completed"] is (story.code == 0), (s4, transcript)
    assert all(a["task_completed"] is False for a in s4[:-1])  # each was followed by another failure
    if story.code == 0:
        assert story.where["carrot"] == "bowl" and "s4 succeeded" in transcript
    else:
        assert story.where["carrot"] != "bowl" and "recovery attempt(s)" in transcript, transcript
