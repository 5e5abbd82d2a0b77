"""Which joint states arm_adapter_node believes, and where its holds go (issue 43: a forged
joint state, then a refused chunk, moved the tool 403 mm). The JointStateGate without ROS,
and the chunk executor fed with forged measurements."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from carryon_arm.core.config import ArmAdapterConfig
from carryon_arm.core.executor import ChunkExecutor, RobotState
from carryon_arm.core.joint_states import StateStatus
from carryon_common.core.chunk import Chunk, ChunkSource, Convention, InvalidChunk
from carryon_common.core.driver import DriverState
from carryon_robot.core.kinematics import ArmKinematics, load_robot

HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785])
DOWN_ROTVEC = np.array([np.pi / np.sqrt(2), np.pi / np.sqrt(2), 0.0])
JOINT1 = np.eye(7)[0]  # a unit move of joint 1, rad
FORGED = HOME + 0.9 * JOINT1  # the probe: joint 1 raised by 0.9 rad
PERIOD_S = 0.01  # the controller's joint states at 100 Hz


@pytest.fixture(scope="module")
def kinematics(config_dir: Path) -> ArmKinematics:
    return load_robot(str(config_dir / "robot" / "panda.yaml")).kinematics()


def executor(kinematics: ArmKinematics, **overrides: object) -> ChunkExecutor:
    """An executor that took HOME as its first position at t = 0."""
    run = ChunkExecutor(kinematics, ArmAdapterConfig(**overrides))  # type: ignore[arg-type]
    verdicts = [run.update_state(state(HOME, 0.0)).status for _ in range(run.config.joint_state_anchor_count)]
    assert verdicts[-1] == StateStatus.ANCHORED
    return run


def state(q: np.ndarray, now: float, measured: float | None = None) -> RobotState:
    return RobotState(np.array(q, dtype=np.float64), 0.08, now, measured)


def chunk(kinematics: ArmKinematics, offsets: list[list[float]]) -> Chunk:
    """ABSOLUTE steps at `offsets` (m) from the tool at HOME, gripper down."""
    start, _ = kinematics.forward(HOME)
    positions = start + np.array(offsets, dtype=np.float64)
    n = len(positions)
    return Chunk(1, "s1", ChunkSource.POLICY, Convention.ABSOLUTE, "world", 0.05, 1, 0.0, positions,
                 np.tile(DOWN_ROTVEC, (n, 1)), np.zeros(n))  # fmt: skip


def tool_moved(kinematics: ArmKinematics, q: np.ndarray) -> float:
    """How far the tool is from its place at HOME, metres."""
    return float(np.linalg.norm(kinematics.forward(q)[0] - kinematics.forward(HOME)[0]))


# -- the gate -----------------------------------------------------------------------------
def test_the_first_position_needs_consistent_joint_states(kinematics: ArmKinematics) -> None:
    run = ChunkExecutor(kinematics, ArmAdapterConfig(joint_state_anchor_count=3))
    assert run.update_state(state(HOME, 0.0)).status == StateStatus.PENDING
    # A second source interleaved from the start: the two never agree, no position is taken.
    for i in range(1, 20):
        verdict = run.update_state(state(FORGED if i % 2 else HOME, i * PERIOD_S))
        assert verdict.status == StateStatus.REFUSED and verdict.joint == "panda_joint1", verdict
        assert verdict.jump_rad == pytest.approx(0.9) and verdict.limit_rad < 0.1
    assert run.state is None and run.gate.refused == 19
    with pytest.raises(InvalidChunk, match="no joint states yet"):
        run.submit(chunk(kinematics, [[0.0, 0.01, 0.0]]), 0.2)
    for i in range(3):
        verdict = run.update_state(state(HOME, 0.2 + i * PERIOD_S))
    assert verdict.status == StateStatus.ANCHORED and run.state is not None


def test_a_jump_beyond_the_joint_speed_is_refused_and_changes_nothing(kinematics: ArmKinematics) -> None:
    run = executor(kinematics)
    verdict = run.update_state(state(FORGED, 0.005))
    assert verdict.status == StateStatus.REFUSED and verdict.joint == "panda_joint1"
    assert verdict.jump_rad == pytest.approx(0.9)
    assert verdict.limit_rad == pytest.approx(2.6 * 0.005 + 0.03)  # max_joint_speed_rad_s * dt + tolerance
    assert run.state is not None and np.array_equal(run.state.q, HOME) and run.gate.refused == 1
    # The genuine stream goes on: each measurement is compared with the last accepted one.
    moving = HOME + 0.01 * np.eye(7)[6]
    assert run.update_state(state(moving, 0.01)).status == StateStatus.ACCEPTED
    assert np.array_equal(run.state.q, moving)
    # What the arm can do grows with the time between them (0.2 rad in 0.1 s at 2.6 rad/s).
    assert run.update_state(state(moving + 0.2 * JOINT1, 0.11)).status == StateStatus.ACCEPTED


def test_stamps_count_but_cannot_buy_a_larger_allowance(kinematics: ArmKinematics) -> None:
    """The time between two measurements is the smaller of what the receipt times and the
    controller's stamps say: late delivery does not widen it, nor do stamps far apart."""
    run = ChunkExecutor(kinematics, ArmAdapterConfig(joint_state_anchor_count=1))
    run.update_state(state(HOME, 0.0, measured=100.0))
    step = HOME + 0.3 * JOINT1  # 0.3 rad: needs 0.1 s at 2.6 rad/s
    delivered_late = run.update_state(state(step, 0.5, measured=100.01))  # measured 10 ms later
    assert delivered_late.status == StateStatus.REFUSED
    stamped_apart = run.update_state(state(step, 0.51, measured=105.0))  # received 10 ms after the last message
    assert stamped_apart.status == StateStatus.REFUSED
    assert run.update_state(state(step, 1.0, measured=100.5)).status == StateStatus.ACCEPTED  # 0.5 s by both


def test_non_finite_and_out_of_limit_joint_states_are_refused(kinematics: ArmKinematics) -> None:
    run = executor(kinematics)
    for bad, joint in ((np.nan, "panda_joint3"), (np.inf, "panda_joint3"), (kinematics.upper[2] + 0.1, "panda_joint3")):
        q = HOME.copy()
        q[2] = bad
        verdict = run.update_state(state(q, 10.0))
        assert verdict.status == StateStatus.REFUSED and verdict.joint == joint, verdict
    assert np.array_equal(run.state.q, HOME)  # type: ignore[union-attr]


def test_a_silence_allows_what_the_arm_can_do_in_it_up_to_the_state_timeout(kinematics: ArmKinematics) -> None:
    """A continuous stream of jumped joint states never accumulates an allowance (each gets
    the time since the message before it); a silence of the topic allows what the arm can do
    in it, and after one longer than state_timeout_s no more than in that time."""
    run = executor(kinematics, state_timeout_s=0.4)
    for i in range(1, 100):
        assert run.update_state(state(FORGED, i * PERIOD_S)).status == StateStatus.REFUSED
    assert run.update_state(state(HOME + 0.5 * JOINT1, 1.3)).status == StateStatus.ACCEPTED  # 0.3 s
    verdict = run.update_state(state(HOME + 1.9 * JOINT1, 60.0))
    assert verdict.status == StateStatus.REFUSED and verdict.limit_rad == pytest.approx(2.6 * 0.4 + 0.03)


# -- holds --------------------------------------------------------------------------------
def test_forged_joint_states_then_a_refused_chunk_leave_the_arm_still(kinematics: ArmKinematics) -> None:
    """The issue's probe on the core: joint 1 raised by 0.9 rad, then a chunk the driver
    refuses. Idle, the hold sends nothing: the controller already holds its last target."""
    run = executor(kinematics)
    run.update_state(state(FORGED, 0.01))
    assert run.hold(0.02) is None and run.mode == DriverState.HOLDING
    # Executing: the hold is the last step sent, whatever was received meanwhile.
    run.submit(chunk(kinematics, [[0.0, 0.01 * i, 0.0] for i in range(1, 6)]), 0.05)
    first = run.tick(0.1)
    assert first is not None and not first.hold
    for i in range(1, 10):
        run.update_state(state(FORGED, 0.1 + i * PERIOD_S))
    held = run.hold(0.2)
    assert held is not None and held.hold and np.array_equal(held.q, first.q)
    assert np.allclose(held.position, first.position) and tool_moved(kinematics, held.q) < 0.011
    assert run.tick(0.25) is None  # holds once


def test_steps_are_solved_and_checked_from_accepted_joint_states_only(kinematics: ArmKinematics) -> None:
    run = executor(kinematics, max_joint_step_rad=0.2)
    run.submit(chunk(kinematics, [[0.0, 0.01 * i, 0.0] for i in range(1, 4)]), 0.0)
    run.update_state(state(FORGED, 0.005))
    command = run.tick(0.05)  # a forged seed / jump check would refuse this step (0.9 rad from FORGED)
    assert command is not None and not command.hold and tool_moved(kinematics, command.q) < 0.011
    assert not run.rejections


def test_a_pause_stops_at_the_last_command(kinematics: ArmKinematics) -> None:
    run = executor(kinematics)
    run.submit(chunk(kinematics, [[0.0, 0.01 * i, 0.0] for i in range(1, 6)]), 0.0)
    first = run.tick(0.05)
    assert first is not None
    run.update_state(state(FORGED, 0.06))
    run.paused = lambda _now: "no heartbeat from the shield for 0.1 s: paused"
    stop = run.guard(0.07)
    assert stop is not None and stop.hold and np.array_equal(stop.q, first.q)
    assert run.mode == DriverState.EXECUTING  # the chunk waits


def test_refused_joint_states_go_stale_and_nothing_is_sent(kinematics: ArmKinematics) -> None:
    """Only jumped measurements arrive (the genuine stream stopped): after state_timeout_s
    the state is stale, a hold sends nothing (the controller keeps its last target, the
    driver's own) and chunks are refused."""
    run = executor(kinematics, state_timeout_s=0.5, watchdog_s=5.0)
    run.submit(chunk(kinematics, [[0.0, 0.01 * i, 0.0] for i in range(1, 40)]), 0.0)
    commands = []
    for i in range(1, 50):
        now = i * PERIOD_S
        run.update_state(state(FORGED, now))
        commands.append(run.tick(now) if i % 5 == 0 else run.guard(now))
    sent = [c for c in commands if c is not None]
    assert len(sent) == 9 and not any(c.hold for c in sent)  # the chunk's steps, solved from HOME
    assert max(tool_moved(kinematics, c.q) for c in sent) < 0.095
    assert run.guard(0.51) is None and run.mode == DriverState.HOLDING
    assert "stale" in run.rejections[-1].reason
    with pytest.raises(InvalidChunk, match="stale"):
        run.submit(chunk(kinematics, [[0.0, 0.01, 0.0]]), 0.57)


def test_no_reanchoring_by_default_and_only_when_idle(kinematics: ArmKinematics) -> None:
    run = executor(kinematics)
    for i in range(1, 200):  # two seconds of a consistent stream at the new place
        assert run.update_state(state(FORGED, i * PERIOD_S)).status == StateStatus.REFUSED
    assert np.array_equal(run.state.q, HOME)  # type: ignore[union-attr]

    run = executor(kinematics, joint_state_reanchor_count=10)
    run.submit(chunk(kinematics, [[0.0, 0.01 * i, 0.0] for i in range(1, 40)]), 0.0)
    sent = run.tick(0.05)
    for i in range(1, 30):  # while a chunk executes: never
        assert run.update_state(state(FORGED, 0.05 + i * PERIOD_S)).status == StateStatus.REFUSED
    run.hold(0.4)
    for i in range(1, 30):  # idle, but a second publisher is on the topic: never
        assert run.update_state(state(FORGED, 0.4 + i * PERIOD_S), may_reanchor=False).status == StateStatus.REFUSED
    verdicts = [run.update_state(state(FORGED, 0.8 + i * PERIOD_S)).status for i in range(1, 11)]
    assert verdicts == [StateStatus.REFUSED] * 9 + [StateStatus.ANCHORED]
    assert np.array_equal(run.state.q, FORGED)  # type: ignore[union-attr]
    # The last command is forgotten: going back to it would move the arm by the jump.
    assert sent is not None
    run.submit(Chunk(2, "s1", ChunkSource.POLICY, Convention.DELTA, "world", 0.05, 1, 0.0, np.zeros((1, 3)),
                     np.zeros((1, 3)), np.zeros(1)), 0.95)  # fmt: skip
    held = run.hold(0.96)
    assert held is not None and np.array_equal(held.q, FORGED)
