"""`carryon bench faults` in its short form, against sim_node and shield_node in their own
processes: the e-stop and a frozen shield stop the moving arm; forged, foreign-key and
replayed chunks on shield/chunk and forged releases on estop/state move nothing; a shield
killed with SIGKILL comes back engaged and releases nothing until the operator does;
`carryon policy run` exits (code 3, the goal lost) when policy_node is killed, even though
its restart policy brings a new one, and SIGTERM to it cancels the goal (code 130). Against
memory_node and planner_node (a scripted LLM over HTTP): no name locks a memory file, a NUL
never reaches a node, no plan or summary writes anything of bob's into dave's or erin's
memory while their own facts are stored, and memory writes, Assist goals and e-stop
releases sent unsigned or by an operator the run does not know are refused. Messages forged
on the decision topics reach the audit log as forged, never as their node's decisions.
Issue 43's probes: a rogue shield task exempts nothing, a reset and replay move nothing, a
second publisher on a shield input fails closed, malformed messages kill no node (sim_node,
shield_node, arm_adapter_node), forged joint states with refused chunks leave the robot
profile's arm still, and the robot profile does not start without its keys.
(The stop and exit times are the benchmark's to report, not this test's to bound.)"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from carryon_bench.core.bench import BenchOptions
from carryon_bench.faults import run

pytestmark = pytest.mark.graph


def test_the_fault_probes_hold_against_the_running_graph(config_dir: Path, tmp_path: Path) -> None:
    result = run(BenchOptions(quick=True, seed=0, run_dir=tmp_path, config_dir=config_dir, episodes=2))
    metrics = {m.name: m for m in result.metrics}
    assert all(math.isfinite(s) for s in result.details["estop_to_rest_s"]), result.details
    assert all(math.isfinite(s) for s in result.details["shield_frozen_to_rest_s"]), result.details
    assert len(result.details["estop_to_rest_s"]) == 2
    forged = metrics["forged_chunks_executed"]
    assert forged.value == 0 and forged.note.startswith("of 6"), result.details["forged_chunks"]
    # each refused by the driver for what it is, not merely unmoved
    assert all(o["driver"] for o in result.details["forged_chunks"]), result.details["forged_chunks"]
    assert metrics["forged_release_moved"].value == 0
    assert metrics["estop_survived_restart"].value == 2, metrics["estop_survived_restart"]
    # Forged plan states, shield events, verdicts, memory changes and e-stop states (10, plus the
    # forged releases) are audited as forged by the recorder, none as the node they claim.
    audit = result.details["audit"]
    assert metrics["forged_decisions_audited_as_node"].value == 0 and audit["flagged"] >= 10, audit
    cli = result.details["cli"]
    assert all(math.isfinite(s) for s in cli["death_exit_s"] + cli["sigterm_exit_s"]), cli
    assert cli["death_codes"] == [3.0, 3.0] and cli["sigterm_codes"] == [130.0, 130.0], cli
    assert cli["chunks_after_sigterm"] == [0.0, 0.0], cli
    memory = result.details["memory"]
    assert metrics["memory_locked_by_name"].value == 0, memory["names"]
    assert not memory["names"]["NUL in the user id"]["landed_in_alice"]
    assert metrics["cross_user_writes"].value == 0, memory["cross_user"]
    assert memory["cross_user"]["own_facts_stored"], memory["cross_user"]
    assert metrics["unauthenticated_accepted"].value == 0, (memory["operators"], result.details["releases"])
    assert not memory["operators"]["alice_diet_meat"], memory["operators"]
    assert all(row["status"] == 7 for row in result.details["releases"].values()), result.details["releases"]
    assert memory["signed_by"], "the bench's own writes are recorded with its proven operator identity"
    answers = memory["cross_user"]["answers"]
    assert "no_foreign_facts" in answers["bob's value for dave"], answers
    assert "no_other_users" in answers["section bob in dave's file"], answers
    # Issue 43's rows (bench/faults_inputs.py, bench/faults_robot.py).
    for name in (
        "rogue_task_steps_into_obstacle",
        "replay_after_reset_moved",
        "second_publisher_released",
        "malformed_killed_sim_shield",
        "malformed_killed_arm_adapter",
        "forged_joint_state_moved",
        "robot_profile_started_without_keys",
    ):
        assert metrics[name].value == 0, (name, metrics[name].note, result.details["inputs"], result.details["robot"])
    inputs = result.details["inputs"]
    assert all(row["set_task"][0] == 7 for row in inputs["rogue_task"]), inputs["rogue_task"]
    assert all(row["refused_as_replay"] for row in inputs["replay"]), inputs["replay"]
    assert inputs["malformed"]["sent"] > 300 and result.details["robot"]["malformed"]["sent"] > 100
