"""policy_node in-process with a fake backend and fake sensors."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, String

from carryon_common.actions import ActionClient
from carryon_common.core.chunk import Convention
from carryon_interfaces.action import RunPolicy
from carryon_interfaces.msg import ActionChunk, InferenceTiming
from carryon_policy.core.policy import (
    Observation,
    PolicyMetadata,
    PolicyOutput,
    PolicyUnavailable,
    UnknownInstruction,
)
from carryon_policy.node import PolicyNode

KNOWN = ("wave",)


@dataclass
class FakePolicy:
    """Moves 1 mm per step in x from the observed pose; `nan` makes every output invalid."""

    nan: bool = False
    fail: bool = False
    observations: list[Observation] = field(default_factory=list)
    resets: list[str] = field(default_factory=list)

    @property
    def metadata(self) -> PolicyMetadata:
        return PolicyMetadata("fake", "fake backend for tests", Convention.ABSOLUTE, horizon=16, instructions=KNOWN)

    def reset(self, instruction: str, seed: int) -> None:
        if instruction not in KNOWN:
            raise UnknownInstruction(instruction, KNOWN)
        self.resets.append(instruction)

    def infer(self, observation: Observation) -> PolicyOutput:
        if self.fail:
            raise PolicyUnavailable("server at ws://127.0.0.1:1 refused the connection")
        self.observations.append(observation)
        steps = observation.robot.ee_position + np.outer(np.arange(1, 17) * 0.001, [1.0, 0.0, 0.0])
        if self.nan:
            steps[3, 1] = math.nan
        return PolicyOutput(steps, np.zeros((16, 3)), np.zeros(16), Convention.ABSOLUTE)

    def close(self) -> None:
        pass


class Sensors:
    """A fake robot: publishes ee_pose, joint_states and gripper width on a timer."""

    def __init__(self, peer) -> None:  # type: ignore[no-untyped-def]
        self.peer = peer
        self.running = True
        self.pose = peer.create_publisher(PoseStamped, "ee_pose", 10)
        self.joints = peer.create_publisher(JointState, "joint_states", 10)
        self.width = peer.create_publisher(Float64, "gripper/width", 10)
        peer.create_timer(0.02, self.publish)

    def publish(self) -> None:
        if not self.running:
            return
        stamp = self.peer.get_clock().now().to_msg()
        pose = PoseStamped()
        pose.header.stamp, pose.header.frame_id = stamp, "world"
        pose.pose.position.x, pose.pose.position.z = 0.5, 0.8
        pose.pose.orientation.w = 1.0
        self.pose.publish(pose)
        joints = JointState(name=[f"panda_joint{i}" for i in range(1, 8)], position=[0.0] * 7)
        joints.header.stamp = stamp
        self.joints.publish(joints)
        self.width.publish(Float64(data=0.08))


def start(ros, policy: FakePolicy, **params):  # type: ignore[no-untyped-def]
    # Observations may be 2 s old (default 0.5 s): in one process on a busy machine the fake
    # robot's 50 Hz timer can wait longer than 0.5 s behind the policy's run loop.
    defaults = {"observation_timeout_s": 1.0, "max_observation_age_s": 2.0}
    overrides = [Parameter(k, value=v) for k, v in {**defaults, **params}.items()]
    node = ros.add(PolicyNode(policy, namespace="carryon", context=ros.context, parameter_overrides=overrides))
    peer = ros.peer("fake_robot")
    sensors = Sensors(peer)
    client = ActionClient(peer, RunPolicy, "policy/run")
    assert client.wait_for_server(timeout_sec=10.0)
    return node, peer, sensors, client


def run_goal(client, instruction: str, budget: int, timeout_s: float = 20.0, on_sent=None):  # type: ignore[no-untyped-def]
    import time

    future = client.send_goal_async(RunPolicy.Goal(instruction=instruction, subtask_id="s1", step_budget=budget))
    deadline = time.monotonic() + timeout_s
    while not future.done():
        assert time.monotonic() < deadline, "goal not answered"
        time.sleep(0.01)
    handle = future.result()
    assert handle.accepted
    if on_sent is not None:
        on_sent(handle)
    result_future = handle.get_result_async()
    while not result_future.done():
        assert time.monotonic() < deadline, "no result"
        time.sleep(0.01)
    return result_future.result().result


def test_chunks_carry_their_observation_and_the_budget_ends_the_goal(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    policy = FakePolicy()
    _node, peer, _sensors, client = start(ros, policy, steps_per_inference=4, chunk_horizon=8)
    chunks: list[ActionChunk] = []
    timings: list[InferenceTiming] = []
    peer.create_subscription(ActionChunk, "policy/chunk", chunks.append, 10)
    peer.create_subscription(InferenceTiming, "policy/timing", timings.append, 10)
    assert wait_until(lambda: _sensors.pose.get_subscription_count() > 0, 5.0)

    result = run_goal(client, "wave", budget=20)

    assert result.status == RunPolicy.Result.STATUS_BUDGET_EXHAUSTED, result.message
    assert (result.steps_executed, result.chunks_sent) == (20, 5)
    assert wait_until(lambda: len(chunks) == 5 and len(timings) == 5, 5.0)
    observed = {o.observation_id: o for o in policy.observations}
    for chunk in chunks:
        assert len(chunk.steps) == 8  # truncated to chunk_horizon
        assert chunk.subtask_id == "s1" and chunk.header.frame_id == "world"
        assert chunk.observation_id in observed
        stamp = chunk.observation_stamp.sec + chunk.observation_stamp.nanosec * 1e-9
        assert stamp == pytest.approx(observed[chunk.observation_id].stamp_s, abs=1e-6)
    assert [t.chunk_id for t in timings] == [c.chunk_id for c in chunks]
    assert all(t.backend == "fake" and t.infer_s >= 0.0 for t in timings)


def test_unknown_instruction_is_refused_with_the_known_skills(ros) -> None:  # type: ignore[no-untyped-def]
    _node, _peer, _sensors, client = start(ros, FakePolicy())
    result = run_goal(client, "make coffee", budget=10)
    assert result.status == RunPolicy.Result.STATUS_REFUSED
    assert "make coffee" in result.message and "'wave'" in result.message
    assert result.chunks_sent == 0


def test_invalid_outputs_are_dropped_and_reported(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    _node, peer, _sensors, client = start(ros, FakePolicy(nan=True))
    chunks: list[ActionChunk] = []
    dropped: list[String] = []
    peer.create_subscription(ActionChunk, "policy/chunk", chunks.append, 10)
    peer.create_subscription(String, "policy/dropped", dropped.append, 10)
    result = run_goal(client, "wave", budget=100)
    assert result.status == RunPolicy.Result.STATUS_FAILED
    assert "3 chunks in a row dropped" in result.message and "NaN" in result.message
    assert wait_until(lambda: len(dropped) == 3, 5.0)
    assert chunks == []


def test_backend_failure_and_stale_observations_fail_the_goal(ros) -> None:  # type: ignore[no-untyped-def]
    _node, _peer, sensors, client = start(ros, FakePolicy(fail=True))
    result = run_goal(client, "wave", budget=100)
    assert result.status == RunPolicy.Result.STATUS_FAILED
    assert "refused the connection" in result.message

    sensors.running = False
    _node.policy.fail = False
    result = run_goal(client, "wave", budget=100, timeout_s=30.0)
    assert result.status == RunPolicy.Result.STATUS_FAILED
    assert "no inference" in result.message and "old" in result.message


def test_cancel_suspends_and_reports_progress(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    policy = FakePolicy()
    _node, _peer, _sensors, client = start(ros, policy)

    def cancel_after_a_chunk(handle) -> None:  # type: ignore[no-untyped-def]
        assert wait_until(lambda: len(policy.observations) >= 2, 5.0)
        handle.cancel_goal_async()

    result = run_goal(client, "wave", budget=10_000, on_sent=cancel_after_a_chunk)
    assert result.status == RunPolicy.Result.STATUS_SUSPENDED
    assert 0 < result.chunks_sent < 50 and result.steps_executed < 10_000


class SimClock:
    """A simulator's /clock at real-time rate from `start_s`; `jump(to_s)` is a reset."""

    def __init__(self, peer, start_s: float) -> None:  # type: ignore[no-untyped-def]
        import time

        from rosgraph_msgs.msg import Clock

        self.msg_type, self.time = Clock, time
        self.pub = peer.create_publisher(Clock, "/clock", 10)
        self.base_s, self.since = start_s, time.monotonic()
        peer.create_timer(0.01, self.publish)

    def now_s(self) -> float:
        return self.base_s + self.time.monotonic() - self.since

    def jump(self, to_s: float) -> None:
        self.base_s, self.since = to_s, self.time.monotonic()

    def publish(self) -> None:
        from builtin_interfaces.msg import Time

        now = self.now_s()
        self.pub.publish(self.msg_type(clock=Time(sec=int(now), nanosec=int((now % 1.0) * 1e9))))


def test_a_simulator_reset_mid_goal_restarts_its_schedule_instead_of_stalling(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    """The node clock (sim time) jumps back 100 s under a running goal: the goal goes on from
    the new time (before, it waited for the clock to reach its old schedule: 100 s, and a
    client gave up on it), and no observation from before the reset is used after it."""
    from rclpy.node import Node

    sim_time = [Parameter("use_sim_time", value=True)]
    policy = FakePolicy()
    clock_node = ros.add(Node("fake_clock", context=ros.context))
    clock = SimClock(clock_node, start_s=200.0)
    node, peer, _sensors, client = start(ros, policy, use_sim_time=True, steps_per_inference=4)
    robot = ros.add(Node("fake_sim_robot", namespace="carryon", context=ros.context, parameter_overrides=sim_time))
    _sensors.running = False  # the robot's stamps are sim time, as a simulator's
    sensors = Sensors(robot)
    assert wait_until(lambda: node.now_s() > 199.0 and robot.get_clock().now().nanoseconds > 199e9, 10.0)
    chunks: list[ActionChunk] = []
    peer.create_subscription(ActionChunk, "policy/chunk", chunks.append, 10)

    def reset_after_a_chunk(_handle) -> None:  # type: ignore[no-untyped-def]
        assert wait_until(lambda: len(chunks) >= 2, 10.0)
        clock.jump(100.0)

    budget = 4 * round(3.0 / node.dt / 4)  # 3 s of steps, ~40 chunks
    result = run_goal(client, "wave", budget=budget, timeout_s=25.0, on_sent=reset_after_a_chunk)
    assert result.status == RunPolicy.Result.STATUS_BUDGET_EXHAUSTED, result.message
    assert result.steps_executed == budget
    after = [o for o in policy.observations if o.stamp_s < 150.0]
    assert after, "no observation after the reset"
    jump = next(i for i, o in enumerate(policy.observations) if o.stamp_s < 150.0)
    assert all(o.stamp_s < 150.0 for o in policy.observations[jump:]), "an observation from before the reset was used"
    assert sensors.running


def test_chunks_are_sent_in_a_real_time_section_and_the_status_says_how(ros, wait_until) -> None:  # type: ignore[no-untyped-def]
    """chunk_send_priority raises only the send (the model runs ordinary); the status shows
    whether the privilege was there, and chunks go out either way."""
    import os

    policy = FakePolicy()
    node, peer, sensors, client = start(ros, policy, chunk_send_priority=3)
    assert [b for b in node._backends if b.startswith("scheduling=")] == [f"scheduling={node.send_section.note}"]
    assert node.send_section.note.startswith(("SCHED_FIFO 3 for sending chunks", "normal (SCHED_FIFO 3"))
    chunks: list[ActionChunk] = []
    peer.create_subscription(ActionChunk, "policy/chunk", chunks.append, 10)
    assert wait_until(lambda: sensors.pose.get_subscription_count() > 0, 5.0)
    seen: list[int] = []
    infer = policy.infer

    def infer_and_look(observation: Observation) -> PolicyOutput:
        seen.append(os.sched_getscheduler(0))
        return infer(observation)

    policy.infer = infer_and_look  # type: ignore[method-assign]
    result = run_goal(client, "wave", budget=16)
    assert result.status == RunPolicy.Result.STATUS_BUDGET_EXHAUSTED, result.message
    assert wait_until(lambda: len(chunks) == 2, 5.0)
    assert seen and all(policy_seen == os.SCHED_OTHER for policy_seen in seen)  # the model ran ordinary
