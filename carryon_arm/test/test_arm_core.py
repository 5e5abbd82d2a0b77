"""arm_adapter_node's logic without ROS: the chunk executor's commands and holds, camera
files and depth conversion (the arm's kinematics: carryon_robot/test/test_robot_kinematics.py)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from carryon_arm.core.cameras import depth_in_metres, load_camera_map
from carryon_arm.core.config import ArmAdapterConfig
from carryon_arm.core.executor import ChunkExecutor, RobotState
from carryon_common.core import driver as common_driver
from carryon_common.core.chunk import Chunk, ChunkSource, Convention, InvalidChunk
from carryon_common.core.config import build_config
from carryon_common.core.driver import LIMITS
from carryon_common.core.driver import DriverState as Mode
from carryon_common.core.errors import ConfigError
from carryon_robot.core.kinematics import ArmKinematics, IkSolution, RobotDescription, load_robot

HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785])
HOME_ROTATION = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])


@pytest.fixture(scope="module")
def panda(config_dir: Path) -> RobotDescription:
    return load_robot(str(config_dir / "robot" / "panda.yaml"))


@pytest.fixture(scope="module")
def kinematics(panda: RobotDescription) -> ArmKinematics:
    return panda.kinematics()


def chunk(positions: list[list[float]], *, convention: Convention = Convention.ABSOLUTE, frame: str = "world",
          gripper: float = 0.0, chunk_id: int = 1) -> Chunk:  # fmt: skip
    n = len(positions)
    home = Rotation.from_matrix(HOME_ROTATION).as_rotvec()  # gripper down, as at home
    rotations = np.tile(home, (n, 1)) if convention == Convention.ABSOLUTE else np.zeros((n, 3))
    return Chunk(chunk_id, "s1", ChunkSource.POLICY, convention, frame, 0.05, 1, 0.0,
                 np.array(positions, dtype=np.float64), rotations, np.full(n, gripper))  # fmt: skip


# -- configuration ------------------------------------------------------------------------
def test_an_inverted_workspace_is_refused() -> None:
    with pytest.raises(ValueError, match="workspace_min"):
        ArmAdapterConfig(workspace_min=[1.0, 0.0, 0.5], workspace_max=[0.5, 0.5, 1.0])


# -- executor -----------------------------------------------------------------------------
def executor(kinematics: ArmKinematics, **overrides: object) -> ChunkExecutor:
    run = ChunkExecutor(kinematics, ArmAdapterConfig(**overrides))  # type: ignore[arg-type]
    anchor(run, HOME, 0.0)
    return run


def anchor(run: ChunkExecutor, q: np.ndarray, now: float) -> None:
    """The first position: as many consistent joint states as the executor needs to take one."""
    for _ in range(run.config.joint_state_anchor_count):
        run.update_state(RobotState(q.copy(), 0.08, now))
    assert run.state is not None


def follow(run: ChunkExecutor, now: float, q: np.ndarray) -> None:
    run.update_state(RobotState(q, 0.08, now))


def test_each_tick_sends_one_step_as_joint_targets_that_reach_it(kinematics: ArmKinematics) -> None:
    run = executor(kinematics)
    start, _ = kinematics.forward(HOME)
    path = [start + np.array([0.0, 0.01 * i, -0.005 * i]) for i in range(1, 6)]
    run.submit(chunk([list(p) for p in path], gripper=1.0), 0.0)
    q = HOME.copy()
    for i, target in enumerate(path):
        command = run.tick(0.05 * (i + 1))
        assert command is not None and not command.hold
        assert np.abs(kinematics.forward(command.q)[0] - target).max() < 1e-3
        assert command.gripper_width_m == pytest.approx(0.0)  # 1 = closed
        q = command.q
        follow(run, 0.05 * (i + 1), q)
    assert run.steps_sent == 5 and not run.rejections


def test_delta_steps_add_to_the_last_commanded_target(kinematics: ArmKinematics) -> None:
    run = executor(kinematics)
    start, _ = kinematics.forward(HOME)
    run.submit(chunk([[0.0, 0.02, 0.0]] * 3, convention=Convention.DELTA), 0.0)
    commands = [run.tick(0.05 * i) for i in range(1, 4)]
    assert np.allclose(commands[-1].position, start + np.array([0.0, 0.06, 0.0]))  # type: ignore[union-attr]


def test_refused_steps_hold_the_arm_with_the_reason(kinematics: ArmKinematics) -> None:
    run = executor(kinematics)
    run.submit(chunk([[0.5, 0.0, 0.3]]), 0.0)  # under the table
    command = run.tick(0.05)
    assert command is not None and command.hold and np.allclose(command.q, HOME)
    assert "outside the workspace" in run.rejections[-1].reason and run.mode == Mode.HOLDING
    run.submit(chunk([[0.9, 0.55, 1.15]]), 0.1)  # inside the box, 75 cm from the arm in one step
    command = run.tick(0.15)
    assert command is not None and command.hold
    assert "in one step (limit 50 mm)" in run.rejections[-1].reason


def test_large_joint_jumps_are_refused(kinematics: ArmKinematics) -> None:
    run = executor(kinematics, max_joint_step_rad=0.02)  # tighter than the shared limit
    start, _ = kinematics.forward(HOME)
    run.submit(chunk([list(start + np.array([0.0, 0.04, 0.0]))]), 0.0)  # within the motion limits
    command = run.tick(0.05)
    assert command is not None and command.hold
    assert run.rejections[-1].reason.startswith("joint 7 would move 0.074 rad in one step")


# -- the shared per-step limits (MotionLimits, issue 46) -------------------------------------
class MissingKinematics:
    """The arm's kinematics, its IK answer changed: `joint_offset` added to the joints, or the
    rotation it misses by reported as `rotation_error_rad`."""

    def __init__(self, kinematics: ArmKinematics, *, joint_offset: np.ndarray | None = None,
                 rotation_error_rad: float = 0.0) -> None:  # fmt: skip
        self.kinematics = kinematics
        self.joint_offset = np.zeros(7) if joint_offset is None else joint_offset
        self.rotation_error_rad = rotation_error_rad

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kinematics, name)

    def inverse(self, q_seed: np.ndarray, position: np.ndarray, rotation: np.ndarray, **kw: Any) -> IkSolution:
        solution = self.kinematics.inverse(q_seed, position, rotation, **kw)
        rotation_error = max(solution.rotation_error_rad, self.rotation_error_rad)
        return replace(solution, q=solution.q + self.joint_offset, rotation_error_rad=rotation_error)


def turned(kinematics: ArmKinematics, yaws: list[float]) -> Chunk:
    """ABSOLUTE steps at the home tool position, the tool turned about world z by each yaw."""
    position, rotation = kinematics.forward(HOME)
    rotvecs = [Rotation.from_matrix(Rotation.from_euler("z", y).as_matrix() @ rotation).as_rotvec() for y in yaws]
    n = len(yaws)
    return Chunk(1, "s1", ChunkSource.POLICY, Convention.ABSOLUTE, "world", 0.05, 1, 0.0, np.tile(position, (n, 1)),
                 np.array(rotvecs), np.zeros(n))  # fmt: skip


@pytest.mark.parametrize("interface", ["joint_trajectory", "pose_target"])
def test_a_wrist_turn_beyond_the_limit_in_one_step_is_refused(kinematics: ArmKinematics, interface: str) -> None:
    run = executor(kinematics, interface=interface)
    run.submit(turned(kinematics, [math.pi]), 0.0)  # a half turn of the wrist in one step
    command = run.tick(0.05)
    assert command is not None and command.hold and np.allclose(command.q, HOME)
    assert "turn 180 deg in one step" in run.rejections[-1].reason
    run.submit(turned(kinematics, [0.08 * i for i in range(1, 6)]), 0.1)  # 1.6 rad/s: fine
    commands = [run.tick(0.1 + 0.05 * i) for i in range(1, 6)]
    assert all(c is not None and not c.hold for c in commands) and len(run.rejections) == 1


def test_turning_the_wrist_past_its_joint_limit_is_refused_not_swung_round(kinematics: ArmKinematics) -> None:
    """0.09 rad per step (within the turn limit) towards joint 7's upper limit: once the
    wrist is there the IK swings joint 1 round instead, 0.24 rad in one step, and the step
    is refused."""
    run = executor(kinematics)
    run.submit(turned(kinematics, [-0.09 * i for i in range(1, 31)]), 0.0)
    for i in range(1, 31):
        command = run.tick(0.05 * i)
        assert command is not None
        if command.hold:
            break
        follow(run, 0.05 * i, command.q)
    assert run.rejections and run.rejections[-1].reason.startswith("joint 1 would move")
    assert command.q[6] > 2.7  # the wrist got close to its limit (2.8973 rad) first


def test_a_joint_jump_beyond_the_shared_limit_is_refused(kinematics: ArmKinematics) -> None:
    """A step whose IK moves a joint 0.15 rad from the last commanded joints (3 rad/s at
    20 Hz), the tool's own step well within the limits, is refused. Joint steps count from
    the last command, not the measured joints: an arm lagging behind its commands is no jump."""
    run = executor(kinematics)
    run.submit(turned(kinematics, [0.08 * i for i in range(1, 5)]), 0.0)  # joint 7 by 0.08 rad per step
    commands = [run.tick(0.05 * i) for i in range(1, 5)]  # the arm does not follow: it stays at HOME
    assert all(c is not None and not c.hold for c in commands) and not run.rejections
    assert abs(commands[-1].q[6] - HOME[6]) > 0.3  # type: ignore[union-attr]
    jumpy = MissingKinematics(kinematics, joint_offset=np.array([0.15, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
    run = ChunkExecutor(jumpy, ArmAdapterConfig())  # type: ignore[arg-type]
    anchor(run, HOME, 0.0)
    start, _ = kinematics.forward(HOME)
    run.submit(chunk([list(start + np.array([0.0, 0.002, 0.0]))]), 0.0)
    command = run.tick(0.05)
    assert command is not None and command.hold and np.allclose(command.q, HOME)
    assert run.rejections[-1].reason.startswith("joint 1 would move 0.15")


def test_an_ik_rotation_error_beyond_the_bound_is_refused(kinematics: ArmKinematics) -> None:
    run = ChunkExecutor(MissingKinematics(kinematics, rotation_error_rad=0.2), ArmAdapterConfig())  # type: ignore[arg-type]
    anchor(run, HOME, 0.0)
    start, _ = kinematics.forward(HOME)
    run.submit(chunk([list(start + np.array([0.0, 0.002, 0.0]))]), 0.0)
    command = run.tick(0.05)
    assert command is not None and command.hold
    assert "IK rotation error 0.200 rad" in run.rejections[-1].reason


@pytest.mark.parametrize(("key", "shared"), [("max_joint_step_rad", "max_joint_step_rad"),
                                             ("max_ik_error_m", "max_ik_position_error_m")])  # fmt: skip
def test_the_config_may_only_tighten_the_shared_limits(key: str, shared: str) -> None:
    limit = getattr(LIMITS, shared)
    with pytest.raises(ConfigError, match=rf"{key} .* above the shared limit MotionLimits.{shared}"):
        build_config(ArmAdapterConfig, {key: 2 * limit}, {}, "arm_adapter_node.yaml")
    tighter = build_config(ArmAdapterConfig, {key: limit / 2}, {}, "arm_adapter_node.yaml")
    assert getattr(tighter.limits, shared) == limit / 2
    assert getattr(ArmAdapterConfig().limits, shared) == limit  # the default is the shared limit


def test_the_executor_checks_the_one_shared_definition_of_the_limits() -> None:
    """arm_adapter_node's executor holds no limits of its own: it calls carryon_common's checks."""
    from carryon_arm.core import executor as arm_executor

    for name in ("step_beyond_limits", "turn_beyond_limits", "joint_step_beyond_limits", "ik_beyond_limits"):
        assert getattr(arm_executor, name) is getattr(common_driver, name), name
    assert replace(ArmAdapterConfig().limits) == LIMITS


def test_watchdog_holds_when_commands_stop(kinematics: ArmKinematics) -> None:
    run = executor(kinematics, watchdog_s=0.25)
    start, _ = kinematics.forward(HOME)
    run.submit(chunk([list(start + np.array([0.0, 0.01, 0.0]))]), 0.0)
    assert run.tick(0.05) is not None
    follow(run, 0.2, HOME)
    assert run.tick(0.2) is None  # within the watchdog period: the controller keeps the target
    follow(run, 0.35, HOME)
    command = run.tick(0.35)
    assert command is not None and command.hold and run.mode == Mode.HOLDING
    assert run.tick(0.4) is None  # holds once, then stays quiet


def test_stale_or_missing_joint_states_refuse_and_hold(kinematics: ArmKinematics) -> None:
    run = ChunkExecutor(kinematics, ArmAdapterConfig())
    with pytest.raises(InvalidChunk, match="no joint states yet"):
        run.submit(chunk([[0.5, 0.0, 0.8]]), 0.0)
    anchor(run, HOME, 0.0)
    with pytest.raises(InvalidChunk, match="stale"):
        run.submit(chunk([[0.5, 0.0, 0.8]]), 2.0)
    start, _ = kinematics.forward(HOME)
    run.submit(chunk([list(start)] * 5), 0.1)
    command = run.tick(1.0)  # the states stopped while executing
    assert command is None and run.mode == Mode.HOLDING  # nothing sent: no going back to an old measurement
    assert "stale" in run.rejections[-1].reason


def test_estop_holds_and_refuses_until_released(kinematics: ArmKinematics) -> None:
    run = executor(kinematics)
    start, _ = kinematics.forward(HOME)
    run.submit(chunk([list(start + np.array([0.0, 0.01 * i, 0.0])) for i in range(1, 10)]), 0.0)
    run.tick(0.05)
    command = run.set_estop(True, 0.05)
    assert command is not None and command.hold
    assert run.tick(0.1) is None
    with pytest.raises(InvalidChunk, match="emergency stop"):
        run.submit(chunk([list(start)]), 0.1)
    run.set_estop(False, 0.1)
    run.submit(chunk([list(start)]), 0.1)
    assert run.mode == Mode.EXECUTING


def test_wrong_frames_are_refused(kinematics: ArmKinematics) -> None:
    run = executor(kinematics)
    with pytest.raises(InvalidChunk, match="frame 'panda_link0'"):
        run.submit(chunk([[0.5, 0.0, 0.8]], frame="panda_link0"), 0.0)


def test_pose_targets_carry_the_step_without_ik(kinematics: ArmKinematics) -> None:
    run = executor(kinematics, interface="pose_target")
    run.submit(chunk([[0.48, 0.02, 0.8]], gripper=0.5), 0.0)  # 4 cm from home: within the motion limits
    command = run.tick(0.05)
    assert command is not None and np.allclose(command.position, [0.48, 0.02, 0.8])
    assert command.gripper_width_m == pytest.approx(0.04)
    position, rotation = kinematics.to_base(command.position, command.rotation)
    assert np.allclose(position, [0.48, 0.02, 0.38])  # base on the table top at z = 0.42
    assert np.allclose(rotation, HOME_ROTATION)


# -- cameras ------------------------------------------------------------------------------
def test_camera_file_validation_and_poses(tmp_path: Path, config_dir: Path) -> None:
    cameras = load_camera_map(config_dir / "arm" / "cameras.yaml").cameras
    assert set(cameras) == {"scene", "wrist"}
    scene = cameras["scene"].optical_pose(None, None)
    assert scene is not None and scene[:3, 2] @ [-1.0, 0.0, 0.0] > 0.5  # it looks back at the robot
    assert cameras["wrist"].optical_pose(None, None) is None  # no tool pose yet
    tool = cameras["wrist"].optical_pose(np.array([0.5, 0.0, 0.8]), np.diag([1.0, -1.0, -1.0]))
    assert tool is not None and np.allclose(tool[:3, 3], [0.5, -0.05, 0.897])
    bad = tmp_path / "cameras.yaml"
    bad.write_text("cameras:\n  scene:\n    color: /c\n    depth: /d\n    camera_info: /i\n    mount: ceiling\n"
                   "    xyz: [0, 0]\n    rpy: [0, 0, 0]\n")  # fmt: skip
    with pytest.raises(ConfigError, match=r"(?s)cameras.yaml: cameras.scene.mount: .*cameras.yaml: cameras.scene.xyz"):
        load_camera_map(bad)


def test_depth_becomes_float_metres_with_nan_for_no_reading() -> None:
    raw = np.array([[0, 1000], [1500, 65535]], dtype=np.uint16)
    metres = depth_in_metres(raw, 0.001)
    assert metres.dtype == np.float32 and np.isnan(metres[0, 0])
    assert np.allclose(metres[0, 1:], [1.0]) and metres[1, 0] == pytest.approx(1.5)
    floats = np.array([[0.5]], dtype=np.float32)
    assert depth_in_metres(floats, 0.001) is floats or np.array_equal(depth_in_metres(floats, 0.001), floats)


def test_a_late_heartbeat_pauses_the_arm_keeping_its_chunk(kinematics: ArmKinematics) -> None:
    """While `paused` (a late shield heartbeat, not yet the timeout) the executor stops the
    arm once where it is and sends nothing more; the chunk waits and goes on when it ends."""
    run = executor(kinematics, watchdog_s=0.25)
    start, _ = kinematics.forward(HOME)
    path = [start + np.array([0.0, 0.01 * i, 0.0]) for i in range(1, 5)]
    run.submit(chunk([list(p) for p in path]), 0.0)
    late: list[str] = []
    run.paused = lambda _now: late[0] if late else None
    first = run.tick(0.05)
    assert first is not None and not first.hold
    late.append("no heartbeat from the shield for 150 ms: paused")
    follow(run, 0.1, first.q)
    stop = run.tick(0.1)
    assert stop is not None and stop.hold and np.allclose(stop.q, first.q)  # stopped at the measured joints
    for now in (0.15, 0.2, 0.3, 0.45):  # quiet while paused, and longer than the watchdog: no hold for it
        follow(run, now, first.q)
        assert run.tick(now) is None
    late.clear()
    follow(run, 0.5, first.q)
    going = run.tick(0.5)
    assert going is not None and not going.hold and np.allclose(going.position, path[1])  # the next step
    assert run.mode == Mode.EXECUTING and not run.rejections


@pytest.mark.parametrize("cause", ["blocked", "paused", "stale"])
def test_the_guard_stops_the_arm_between_control_periods(kinematics: ArmKinematics, cause: str) -> None:
    """arm_adapter_node runs `guard` at guard_rate_hz: a silent or late shield, or stale joint
    states, stop the arm at once, not at the next step (50 ms later at 20 Hz)."""
    run = executor(kinematics, watchdog_s=0.25)
    start, _ = kinematics.forward(HOME)
    run.submit(chunk([list(start + np.array([0.0, 0.01 * i, 0.0])) for i in range(1, 5)]), 0.0)
    first = run.tick(0.05)
    assert first is not None and not first.hold
    follow(run, 0.06, first.q)
    assert run.guard(0.06) is None  # nothing stops it: no command between steps
    if cause == "blocked":
        run.blocked = lambda _now: "no heartbeat from the shield for 0.45 s"
    elif cause == "paused":
        run.paused = lambda _now: "no heartbeat from the shield for 0.1 s: paused"
    stop = run.guard(0.07 if cause != "stale" else 0.7)  # stale: no joint states since 0.06 (limit 0.5 s)
    if cause == "stale":
        assert stop is None and run.mode == Mode.HOLDING  # nothing to go back to: the controller keeps its target
    else:
        assert stop is not None and stop.hold and np.allclose(stop.q, first.q)
        assert run.mode == (Mode.EXECUTING if cause == "paused" else Mode.HOLDING)
    assert run.guard(0.08 if cause != "stale" else 0.75) is None  # once
