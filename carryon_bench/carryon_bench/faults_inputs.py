"""The input probes of `carryon bench faults` (issue 43), against sim_node, shield_node and
policy_node in their own processes, by a process on the same DDS domain that holds no key:

* **rogue task**: a chunk driving the hand into the bottle is sent through the shield twice
  from the same start (the simulator reset in between): once as it is (the control: the
  shield cuts it before the bottle), once after an unsigned `shield/set_task` names the
  bottle the target and permits contact with it. The rogue task must change nothing: as
  many steps released as in the control, no contact with the bottle in the simulator.
* **reset and replay**: a signed release and a signed chunk of the shield are captured and
  kept for 10 s (400 heartbeats); the operator engages the e-stop; an unsigned `sim/reset` must be refused; a signed one
  (an operator's reset) sets the driver's clock back, and once the clock has reached the
  captured stamps again, the release and the chunk are replayed: the arm must not move.
* **second publisher**: an intruder publishing tool poses on `ee_pose`: once the shield has
  matched it, chunks must fail closed naming the topic, and pass again once it is gone.

Each trial's outcome is a plain record; faults.py turns them into metrics.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from carryon_bench.faults_probe import EXECUTED_M, FaultProbe

OBSTACLE = "bottle"
TIMEOUT_S = 30.0
# Seconds between capturing the shield's messages and replaying them: at 40 heartbeats a second,
# more than the 256 signatures the driver's guard once remembered besides the time window.
PATIENCE_S = 10.0


def _intruder(probe: FaultProbe) -> Any:
    """A ROS session on the graph's domain that signs nothing (no operator key)."""
    from carryon_common.calls import RosSession

    return RosSession("intruder", domain_id=probe.graph.domain_id, identity=None)


def _object(probe: FaultProbe, name: str) -> np.ndarray:
    """An object's position from the simulator's ground truth (sim/state: evaluation only)."""
    from carryon_interfaces.srv import SimState

    state = probe.session.call(SimState, probe.ns + "sim/state", SimState.Request(), TIMEOUT_S)
    pose = next(o.pose for o in state.objects if o.name == name)
    return np.array([pose.position.x, pose.position.y, pose.position.z])


def _collisions(probe: FaultProbe) -> int:
    from carryon_interfaces.srv import SimState

    return int(probe.session.call(SimState, probe.ns + "sim/state", SimState.Request(), TIMEOUT_S).collisions)


def reset(probe: FaultProbe, seed: int, session: Any = None) -> tuple[int, str]:
    """sim/reset from `session` (default: the probe's, signed as this login's operator);
    (status, message). Waits for fresh tool poses after a reset that was accepted."""
    from carryon_interfaces.srv import SimReset

    answer = (session or probe.session).call(SimReset, probe.ns + "sim/reset", SimReset.Request(seed=seed), TIMEOUT_S)
    if answer.status == 0:
        probe.poses.clear()
        if not probe.spin(TIMEOUT_S, lambda: len(probe.poses) > 5 and probe.still()):
            raise RuntimeError("no tool pose at rest after sim/reset")
        probe.fresh_clock()
    return int(answer.status), str(answer.message)


def _into(probe: FaultProbe, target: np.ndarray, steps: int = 40) -> Any:
    """A DELTA chunk from the tool to 3 cm past `target`'s centre line at its height + 5 cm."""
    aim = np.array([target[0], target[1], target[2] + 0.05])
    path = aim - probe.tool()
    path += 0.03 * path / max(float(np.linalg.norm(path)), 1e-9)
    msg = probe.chunk(steps, 0.0)
    for step in msg.steps:
        step.position.x, step.position.y, step.position.z = (float(v) for v in path / steps)
    return msg


def _decision(probe: FaultProbe, chunk: Any) -> Any:
    """Publish `chunk` on policy/chunk and wait for the shield's event about it."""
    seen = len(probe.event_msgs)
    probe.policy_pub.publish(chunk)
    mine = lambda: next((e for e in probe.event_msgs[seen:] if e.chunk_id == chunk.chunk_id), None)  # noqa: E731
    if not probe.spin(TIMEOUT_S, lambda: mine() is not None):
        raise RuntimeError(f"the shield did not answer chunk {chunk.chunk_id}")
    probe.spin(2.0, probe.still)  # what was released has been executed
    return mine()


def _perceived_decision(probe: FaultProbe, target: str) -> Any:
    """The shield's decision on a chunk into `target` once it perceives (a chunk it fails
    closed on for stale or missing inputs just after a reset says nothing about exemptions:
    sent again, up to 20 times)."""
    from carryon_interfaces.msg import ShieldEvent

    failed_closed = (ShieldEvent.DECISION_REJECTED_STALE, ShieldEvent.DECISION_REJECTED_NO_PERCEPTION)
    for _attempt in range(20):
        decision = _decision(probe, _into(probe, _object(probe, target)))
        if decision.decision not in failed_closed:
            break
        probe.spin(0.5)
    return decision


def rogue_task_trials(probe: FaultProbe, trials: int, seed: int = 0) -> list[dict[str, Any]]:
    """Per trial: steps released of the control and of the rogue run, the rogue task's
    answer, and the simulator's new contacts during the rogue run."""
    from carryon_interfaces.srv import SetTask

    rows = []
    with _intruder(probe) as intruder:
        for trial in range(trials):
            reset(probe, seed + trial)
            control = _perceived_decision(probe, OBSTACLE)
            reset(probe, seed + trial)
            task = SetTask.Request(subtask_id="rogue", target=OBSTACLE, permitted_contacts=[OBSTACLE])
            answer = intruder.call(SetTask, probe.ns + "shield/set_task", task, TIMEOUT_S)
            before = _collisions(probe)
            rogue = _perceived_decision(probe, OBSTACLE)
            rows.append(
                {
                    "set_task": [int(answer.status), str(answer.message)],
                    "control_released": int(control.released_steps),
                    "control_reason": str(control.reason),
                    "rogue_released": int(rogue.released_steps),
                    "total_steps": int(rogue.total_steps),
                    "rogue_reason": str(rogue.reason),
                    "contacts": _collisions(probe) - before,
                }
            )
    return rows


def _captured(probe: FaultProbe) -> tuple[Any, Any]:
    """A signed release of the shield and a signed chunk it released, both captured off the
    wire early in a run (stamps a second or two after a reset)."""
    if not probe.start_moving():
        raise RuntimeError(
            f"the arm did not move through the shield (shield: {probe.events[-3:]}; driver: {probe.rejections[-3:]})"
        )
    chunk = probe.released[-1]
    seen = len(probe.estop_states)
    probe.estop(True, "bench: before the capture")
    probe.estop(False, "bench: the release to capture")
    probe.spin(5.0, lambda: any(not m.active for m in probe.estop_states[seen:]))
    release = next(m for m in reversed(probe.estop_states) if not m.active)
    return release, chunk


def replay_trials(probe: FaultProbe, trials: int, seed: int = 0) -> list[dict[str, Any]]:
    """Per trial: the unsigned reset's answer, whether the signed reset was taken, how far
    the tool moved after the replay, and whether the driver refused both replays."""
    rows = []
    with _intruder(probe) as intruder:
        for trial in range(trials):
            reset(probe, seed + trial)
            # The previous trial's stop is released only now, on the driver's new clock: a release
            # sent just before a reset can reach the driver after it, stamped ahead of its clock,
            # and the driver rightly refuses it as stale (its latch stays engaged).
            probe.estop(False, "bench: the trial starts")
            release, chunk = _captured(probe)
            probe.spin(PATIENCE_S)  # a patient attacker: hundreds of heartbeats pass before the replay
            probe.estop(True, "bench: the operator stops the arm")
            unsigned = reset(probe, seed + trial, session=intruder)
            signed = reset(probe, seed + trial)
            stamp = release.header.stamp.sec + release.header.stamp.nanosec * 1e-9
            probe.spin(TIMEOUT_S, lambda s=stamp: probe.sim_now >= s)  # the captured stamps look fresh again
            start, seen = probe.tool(), len(probe.rejections)
            probe.forged_estop_pub.publish(release)
            probe.spin(0.3)
            probe.forged_pub.publish(chunk)
            probe.spin(2.0)
            moved = float(np.linalg.norm(probe.tool() - start))
            refused = [r for r in probe.rejections[seen:] if "replay" in r or "earlier run" in r]
            rows.append(
                {
                    "unsigned_reset": list(unsigned),
                    "signed_reset_taken": signed[0] == 0,
                    "moved_m": moved,
                    "moved": moved > EXECUTED_M,
                    "driver": probe.rejections[seen:][:4],
                    "refused_as_replay": len(refused),
                }
            )
    probe.estop(False, "bench: end of the replay probe")
    return rows


MATCH_WAIT_S = 15.0  # the longest the shield's reader may take to match a new writer on its input


def second_publisher_trials(probe: FaultProbe, trials: int) -> list[dict[str, Any]]:
    """Per trial: an intruder publishes tool poses 20 cm off the real ones on ee_pose. Chunks
    are sent until the shield fails one closed naming the topic (its reader matches the new
    writer a moment after the writer matches it; no data flows before), then three more:
    released steps among those, the seconds it took, and whether chunks pass again once the
    intruder has left."""
    from geometry_msgs.msg import PoseStamped

    from carryon_common.qos import qos_for

    rows = []
    with _intruder(probe) as intruder:
        for _ in range(trials):
            publisher = intruder.node.create_publisher(PoseStamped, probe.ns + "ee_pose", qos_for("ee_pose"))
            started, named, during = time.monotonic(), None, 0
            # Until the shield names the topic, bounded by time (not by a count of chunks, whose
            # pace follows the machine's load): DDS matches the new writer within about 2 s here.
            while time.monotonic() - started < MATCH_WAIT_S:
                forged = PoseStamped()
                forged.header.frame_id, forged.header.stamp = "world", intruder.node.get_clock().now().to_msg()
                forged.pose.position.x, forged.pose.position.z = probe.tool()[0] + 0.2, probe.tool()[2]
                forged.pose.orientation.w = 1.0
                publisher.publish(forged)
                decision = _decision(probe, probe.chunk(4, 0.001))
                if "publishers on" in decision.reason:
                    named = decision
                    break
            detect_s = time.monotonic() - started
            for _chunk in range(3):  # while it stays: nothing released
                during += int(_decision(probe, probe.chunk(4, 0.001)).released_steps)
            intruder.node.destroy_publisher(publisher)
            after = None
            for _attempt in range(10):  # the match goes away, then the inputs are fresh again
                probe.spin(0.5)
                after = _decision(probe, probe.chunk(4, 0.001))
                if after.released_steps:
                    break
            rows.append(
                {
                    "named": named is not None,
                    "reason": str(named.reason) if named is not None else "",
                    "seconds_to_fail_closed": detect_s,
                    "during_released": during,
                    "after_released": int(after.released_steps) if after is not None else 0,
                }
            )
    return rows


def input_probes(probe: FaultProbe, trials: int, rounds: int, folder: Path) -> dict[str, Any]:
    """Every probe above plus rounds of malformed messages against sim_node and shield_node."""
    from carryon_bench.faults_robot import fuzz_rounds

    return {
        "rogue_task": rogue_task_trials(probe, trials),
        "replay": replay_trials(probe, trials),
        "second_publisher": second_publisher_trials(probe, trials),
        "malformed": fuzz_rounds(probe.graph, ("sim_node", "shield_node"), "bowl", rounds, folder),
    }


def input_metrics(result: Any, inputs: dict[str, Any], robot: dict[str, Any]) -> None:
    """The rows of issue 43's probes (`carryon bench faults`)."""
    rogue = inputs["rogue_task"]
    extra = sum(max(0, r["rogue_released"] - r["control_released"]) + r["contacts"] for r in rogue)
    refused = sum(r["set_task"][0] == 7 for r in rogue)
    note = f"steps released beyond the control + contacts, {len(rogue)} trials; unsigned SetTask refused {refused}x"
    result.add("rogue_task_steps_into_obstacle", extra, "steps", note)
    replay = inputs["replay"]
    worst = max((r["moved_m"] for r in replay), default=0.0) * 1000
    refused = sum(r["unsigned_reset"][0] == 7 for r in replay)
    note = f"of {len(replay)} (signed reset, then a captured release + chunk); max {worst:.1f} mm; "
    note += f"unsigned reset refused {refused}x"
    result.add("replay_after_reset_moved", sum(r["moved"] for r in replay), "trials", note)
    second = inputs["second_publisher"]
    back = sum(r["after_released"] > 0 for r in second)
    slowest = max((r["seconds_to_fail_closed"] for r in second), default=0.0)
    note = f"steps released, {3 * len(second)} chunks with 2 publishers on ee_pose ({len(second)} trials); "
    note += f"named within {slowest:.1f} s in {sum(r['named'] for r in second)}; released again once it left: {back}"
    result.add("second_publisher_released", sum(r["during_released"] + (not r["named"]) for r in second), "steps", note)
    for name, fuzz in (("sim_shield", inputs["malformed"]), ("arm_adapter", robot["malformed"])):
        note = f"{fuzz['sent']} malformed messages and requests; {fuzz['dead'] or 'none died'}"
        result.add(f"malformed_killed_{name}", len(fuzz["dead"]) + len(fuzz["restarted"]), "nodes", note)
    forged = robot["forged_joint_state"]
    worst = max((r["moved_mm"] for r in forged), default=0.0)
    note = f"of {len(forged)} (forged joint 1 +0.9 rad, refused chunks); max {worst:.1f} mm"
    result.add("forged_joint_state_moved", sum(r["moved_mm"] > EXECUTED_M * 1000 for r in forged), "trials", note)
    keyless = robot["keyless"]
    started = sum(r["exit_code"] != 2 or r["nodes_started"] for r in keyless)
    note = f"of {len(keyless)} `carryon up --profile robot` without keys; named `carryon keys init`: "
    note += f"{sum(r['names_the_fix'] for r in keyless)}"
    result.add("robot_profile_started_without_keys", started, "starts", note)
