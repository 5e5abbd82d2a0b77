"""The simulated arm's driver: released chunks in, joint targets out, holding when in doubt."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from carryon_common.core import driver as common_driver
from carryon_common.core.chunk import Chunk, ChunkSource, Convention, InvalidChunk
from carryon_sim.core.driver import Driver, DriverState
from carryon_sim.core.ik import ArmIk, IkResult
from carryon_sim.core.scene import Scene, SceneSpec
from carryon_sim.core.world import World

DT = 0.05  # 20 Hz control


@pytest.fixture(scope="module")
def world() -> World:
    return World(Scene(Path("empty.yaml"), SceneSpec(name="empty", description="no objects", objects=[])))


def chunk(
    steps: np.ndarray, *, frame: str = "world", convention: Convention = Convention.DELTA, grip: float = 0.0
) -> Chunk:
    n = len(steps)
    return Chunk(1, "s1", ChunkSource.POLICY, convention, frame, DT, 1, 0.0, steps.astype(float), np.zeros((n, 3)),
                 np.full(n, grip))  # fmt: skip


def run(world: World, driver: Driver, seconds: float) -> None:
    for _ in range(round(seconds / DT)):
        driver.tick(world.time)
        world.step(DT)


def test_delta_chunk_moves_the_tool(world: World) -> None:
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    start = world.ee_pose()[0]
    driver.submit(chunk(np.tile([0.005, 0.0, -0.003], (10, 1)), grip=1.0), world.time)
    run(world, driver, 1.5)
    moved = world.ee_pose()[0] - start
    assert np.allclose(moved, [0.05, 0.0, -0.03], atol=0.005)
    assert driver.steps_executed == 10
    assert world.gripper_width() < 0.01  # the gripper command was executed too


def test_watchdog_holds_the_arm_when_commands_stop(world: World) -> None:
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    driver.submit(chunk(np.tile([0.0, 0.004, 0.0], (3, 1))), world.time)
    run(world, driver, 0.6)
    assert driver.state == DriverState.HOLDING
    held = world.ee_pose()[0]
    run(world, driver, 0.5)
    assert np.linalg.norm(world.ee_pose()[0] - held) < 0.002


def test_wrong_frame_and_nan_are_refused_and_the_arm_holds(world: World) -> None:
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    q = world.arm_q()
    with pytest.raises(InvalidChunk, match="frame 'panda_link0' is not supported"):
        driver.submit(chunk(np.tile([0.01, 0.0, 0.0], (3, 1)), frame="panda_link0"), world.time)
    with pytest.raises(InvalidChunk, match="NaN"):
        driver.submit(chunk(np.array([[np.nan, 0.0, 0.0]])), world.time)
    run(world, driver, 0.3)
    assert np.allclose(world.arm_q(), q, atol=1e-3)


def test_targets_outside_the_workspace_are_rejected_and_reported(world: World) -> None:
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    driver.submit(chunk(np.array([[0.5, 0.0, 0.3]]), convention=Convention.ABSOLUTE), world.time)  # under the table
    run(world, driver, 0.3)
    assert driver.state == DriverState.HOLDING
    assert "outside the workspace" in driver.rejections[-1].reason
    assert driver.steps_executed == 0


def test_estop_holds_and_refuses_new_chunks(world: World) -> None:
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    driver.submit(chunk(np.tile([0.005, 0.0, 0.0], (10, 1))), world.time)
    run(world, driver, 0.1)
    driver.estop = True
    run(world, driver, 0.1)
    held = world.ee_pose()[0]
    run(world, driver, 0.5)
    assert np.linalg.norm(world.ee_pose()[0] - held) < 0.002
    with pytest.raises(InvalidChunk, match="emergency stop"):
        driver.submit(chunk(np.tile([0.005, 0.0, 0.0], (3, 1))), world.time)


def test_a_step_beyond_the_motion_limits_from_the_last_target_holds_the_arm(world: World) -> None:
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    start = world.ee_pose()[0]
    jump = start + np.array([0.0, 0.35, 0.0])  # one absolute step 35 cm away: 7 m/s at 20 Hz
    driver.submit(chunk(np.array([jump]), convention=Convention.ABSOLUTE), world.time)
    run(world, driver, 0.3)
    assert driver.state == DriverState.HOLDING and driver.steps_executed == 0
    assert "350 mm in one step" in driver.rejections[-1].reason
    assert np.linalg.norm(world.ee_pose()[0] - start) < 0.002
    with pytest.raises(InvalidChunk, match="more than the limit"):
        driver.submit(chunk(np.zeros((10_000, 3))), world.time)


def test_a_late_heartbeat_stops_the_arm_and_the_chunk_goes_on_when_it_returns(world: World) -> None:
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    late: list[str] = []
    driver.paused = lambda _now: late[0] if late else None
    start = world.ee_pose()[0]
    driver.submit(chunk(np.tile([0.004, 0.0, 0.0], (20, 1))), world.time)
    run(world, driver, 0.25)  # 5 steps
    late.append("no heartbeat from the shield for 150 ms: paused")
    run(world, driver, 0.2)  # the arm ends its step and stops there
    paused_at = world.ee_pose()[0]
    run(world, driver, 0.6)  # longer than the watchdog: still paused, not holding
    assert np.linalg.norm(world.ee_pose()[0] - paused_at) < 0.001
    assert driver.state == DriverState.EXECUTING and driver.steps_executed <= 6
    late.clear()
    run(world, driver, 1.2)  # the rest of the chunk
    assert driver.steps_executed == 20 and not driver.rejections
    assert np.allclose(world.ee_pose()[0] - start, [0.08, 0.0, 0.0], atol=0.005)


@pytest.mark.parametrize("cause", ["estop", "blocked", "paused"])
def test_the_guard_stops_the_arm_between_steps(world: World, cause: str) -> None:
    """sim_node runs `guard` between a control period's physics slices: an e-stop or a silent
    shield holds the arm within the slice, not at the next step (up to 50 ms later); a late
    heartbeat lets it end the step in progress and take no new one."""
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    driver.submit(chunk(np.tile([0.005, 0.0, 0.0], (20, 1))), world.time)
    run(world, driver, 0.2)
    driver.tick(world.time)  # a step of 5 mm
    world.step(0.01)  # the period's first slice
    assert driver.guard(world.time) is False  # nothing stops it: the step goes on
    if cause == "estop":
        driver.estop = True
    elif cause == "blocked":
        driver.blocked = lambda _now: "no heartbeat from the shield for 0.45 s"
    else:
        driver.paused = lambda _now: "no heartbeat from the shield for 0.1 s: paused"
    at = world.ee_pose()[0]
    assert driver.guard(world.time) is True
    world.step(0.04)  # the rest of the period: going on, the tool would move 4 mm more
    if cause == "paused":  # no new step: the arm ends the one in progress (released) and stops there
        driver.tick(world.time)
        world.step(0.2)
        ended = world.ee_pose()[0]
        assert np.linalg.norm(ended - at) < 0.006 and driver.state == DriverState.EXECUTING
        driver.tick(world.time)
        world.step(0.3)
        assert np.linalg.norm(world.ee_pose()[0] - ended) < 0.0005
    else:  # an e-stop or a silent shield: held where it is
        assert np.linalg.norm(world.ee_pose()[0] - at) < 0.0015
        assert driver.state == DriverState.HOLDING


# -- the shared per-step limits (MotionLimits, issue 46) -------------------------------------
class MissingIk(ArmIk):
    """The arm's IK, its answer changed: `joint_offset` added to the joints it solves, or the
    rotation it misses by reported as `rotation_error_rad`."""

    def __init__(self, world: World, *, joint_offset: np.ndarray | None = None, rotation_error_rad: float = 0.0):
        super().__init__(world.model, world.robot)
        self.joint_offset = np.zeros(7) if joint_offset is None else joint_offset
        self.rotation_error_rad = rotation_error_rad

    def solve(self, q_start: np.ndarray, target_pos: np.ndarray, target_rot: np.ndarray, **kw: Any) -> IkResult:
        solution = super().solve(q_start, target_pos, target_rot, **kw)
        rotation_error = max(solution.rotation_error_rad, self.rotation_error_rad)
        return replace(solution, q=solution.q + self.joint_offset, rotation_error_rad=rotation_error)


def turned_in_place(world: World, yaws: list[float]) -> Chunk:
    """ABSOLUTE steps at the tool's position, the tool turned about world z by each yaw."""
    position, rotation = world.ee_pose()
    rotvecs = [Rotation.from_matrix(Rotation.from_euler("z", y).as_matrix() @ rotation).as_rotvec() for y in yaws]
    n = len(yaws)
    return Chunk(1, "s1", ChunkSource.POLICY, Convention.ABSOLUTE, "world", DT, 1, 0.0, np.tile(position, (n, 1)),
                 np.array(rotvecs), np.zeros(n))  # fmt: skip


def test_a_wrist_turn_beyond_the_limit_in_one_step_holds_the_arm(world: World) -> None:
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25)
    q = world.arm_q()
    driver.submit(turned_in_place(world, [math.pi]), world.time)  # a half turn of the wrist in one step
    run(world, driver, 0.3)
    assert driver.state == DriverState.HOLDING and driver.steps_executed == 0
    assert "turn 180 deg in one step" in driver.rejections[-1].reason
    assert np.allclose(world.arm_q(), q, atol=1e-3)
    driver.submit(turned_in_place(world, [0.08 * i for i in range(1, 6)]), world.time)  # 1.6 rad/s: fine
    run(world, driver, 0.5)
    assert driver.steps_executed == 5 and len(driver.rejections) == 1


def test_a_joint_jump_beyond_the_limit_holds_the_arm(world: World) -> None:
    """A step whose IK moves a joint 0.15 rad from the last commanded joints (3 rad/s at
    20 Hz), the tool's own step well within the limits."""
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25, ik=MissingIk(world, joint_offset=np.array([0.15, 0, 0, 0, 0, 0, 0])))
    commanded = world.arm_target()
    driver.submit(chunk(np.array([[0.002, 0.0, 0.0]])), world.time)
    run(world, driver, 0.3)
    assert driver.state == DriverState.HOLDING and driver.steps_executed == 0
    assert driver.rejections[-1].reason.startswith("joint 1 would move 0.150 rad in one step")
    assert np.allclose(world.arm_q(), commanded, atol=2e-3)
    small = Driver(world, watchdog_s=0.25, ik=MissingIk(world, joint_offset=np.array([0.05, 0, 0, 0, 0, 0, 0])))
    small.submit(chunk(np.array([[0.002, 0.0, 0.0]])), world.time)
    run(world, small, 0.1)
    assert small.steps_executed == 1 and not small.rejections


def test_an_ik_rotation_error_beyond_the_bound_holds_the_arm(world: World) -> None:
    world.reset(0)
    driver = Driver(world, watchdog_s=0.25, ik=MissingIk(world, rotation_error_rad=0.2))
    driver.submit(chunk(np.array([[0.002, 0.0, 0.0]])), world.time)
    run(world, driver, 0.3)
    assert driver.state == DriverState.HOLDING and driver.steps_executed == 0
    assert "IK rotation error 0.200 rad" in driver.rejections[-1].reason


def test_the_driver_checks_the_one_shared_definition_of_the_limits() -> None:
    """sim_node's driver holds no limits of its own: it calls carryon_common's checks."""
    from carryon_sim.core import driver as sim_driver

    for name in ("step_beyond_limits", "turn_beyond_limits", "joint_step_beyond_limits", "ik_beyond_limits"):
        assert getattr(sim_driver, name) is getattr(common_driver, name), name
    assert not [name for name in vars(sim_driver) if name.startswith("MAX_")]  # no constant beside them
