"""Motion backends of recovery: the built-in Cartesian + IK check on the arm's model, and
the MoveIt backend's conversion of a joint path into shielded tool steps (with a stand-in
planner: MoveIt itself is not installable here)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from carryon_common.core.chunk import Convention
from carryon_common.core.driver import LIMITS, check_limits, rotation_angle
from carryon_recovery.core.motion import CartesianIk, MoveItPlanner, recovery_chunk, recovery_turn_rad, resample
from carryon_robot.core.kinematics import ArmKinematics, load_robot

HOME = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785])


@pytest.fixture(scope="module")
def arm(config_dir: Path) -> ArmKinematics:
    return load_robot(str(config_dir / "robot" / "panda.yaml")).kinematics()


def test_resample_spaces_steps_evenly_and_ends_on_the_goal() -> None:
    samples = resample(np.zeros(3), np.array([[0.1, 0.0, 0.0], [0.1, 0.1, 0.0]]), 0.006)
    assert np.allclose(samples[-1], [0.1, 0.1, 0.0])
    gaps = np.linalg.norm(np.diff(np.vstack([np.zeros(3), samples]), axis=0), axis=1)
    assert gaps.max() <= 0.006 + 1e-9 and gaps.min() > 0.005


def test_builtin_checks_every_step_by_ik(arm: ArmKinematics) -> None:
    start, rotation = arm.forward(HOME)
    goal = start + np.array([0.05, 0.15, -0.2])
    plan = CartesianIk(arm).plan(HOME, start, np.array([goal]), rotation, 0.006)
    assert plan.ok and plan.joints is not None and len(plan.joints) == len(plan.positions)
    reached = np.array([arm.forward(q)[0] for q in plan.joints])
    assert np.abs(reached - plan.positions).max() < 1e-3
    assert np.abs(np.diff(plan.joints, axis=0)).max() < 0.3  # a smooth joint path


def test_builtin_refuses_unreachable_paths_and_joint_flips_before_moving(arm: ArmKinematics) -> None:
    start, rotation = arm.forward(HOME)
    far = CartesianIk(arm).plan(HOME, start, np.array([[1.4, 0.0, 0.8]]), rotation, 0.006)
    assert not far.ok and far.reason.startswith("unreachable: step")
    sideways = np.array([start + np.array([0.0, 0.05, 0.0])])
    flips = CartesianIk(arm, max_joint_step_rad=1e-4).plan(HOME, start, sideways, rotation, 0.006)
    assert not flips.ok and "joint flip" in flips.reason
    blind = CartesianIk(arm).plan(None, start, np.array([start]), rotation, 0.006)
    assert not blind.ok and "no joint states" in blind.reason


def test_moveit_paths_become_tool_steps_through_forward_kinematics(arm: ArmKinematics) -> None:
    start, rotation = arm.forward(HOME)
    goal = start + np.array([0.0, 0.1, -0.1])
    q_goal = arm.inverse(HOME, goal, rotation).q
    asked: list[tuple[np.ndarray, np.ndarray]] = []

    def plan_joints(q0: np.ndarray, position: np.ndarray, _rotation: np.ndarray) -> tuple[np.ndarray | None, str]:
        asked.append((q0, position))
        return np.linspace(q0, q_goal, 12), ""

    plan = MoveItPlanner(arm, plan_joints).plan(HOME, start, np.array([goal]), rotation, 0.006)
    assert plan.ok and np.allclose(asked[0][0], HOME) and np.allclose(asked[0][1], goal)
    assert np.abs(plan.positions[-1] - goal).max() < 1e-3
    gaps = np.linalg.norm(np.diff(np.vstack([start, plan.positions]), axis=0), axis=1)
    assert gaps.max() <= 0.006 + 1e-9  # resampled at the recovery speed

    failed = MoveItPlanner(arm, lambda *_: (None, "goal in collision")).plan(HOME, start, np.array([goal]),
                                                                            rotation, 0.006)  # fmt: skip
    assert not failed.ok and failed.reason == "MoveIt found no path: goal in collision"


def test_tool_frame_goal_puts_the_tcp_on_the_target(arm: ArmKinematics) -> None:
    start, rotation = arm.forward(HOME)
    position, hand = arm.tool_frame_in_base(start, rotation)
    # the hand sits 96.5 mm behind the fingertips, along the (downward) tool axis, in the base frame
    assert np.allclose(position, start - [0.0, 0.0, 0.42] + hand @ [0.0, 0.0, -0.0965], atol=1e-9)
    assert np.allclose(position, start - [0.0, 0.0, 0.42] + [0.0, 0.0, 0.0965], atol=1e-3)


def turned(rotation: np.ndarray, yaw: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    out: np.ndarray = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]) @ rotation
    return out


def test_a_parallel_gripper_may_turn_half_way_round_when_the_wrist_cannot(arm: ArmKinematics) -> None:
    wrist_near_limit = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 2.8])  # last joint limit: 2.9 rad
    start, rotation = arm.forward(wrist_near_limit)
    goal = np.array([start + np.array([0.0, 0.05, -0.05])])
    wanted = turned(rotation, -1.5)  # beyond the wrist's limit
    strict = CartesianIk(arm, symmetric_tool=False).plan(wrist_near_limit, start, goal, wanted, 0.006)
    assert not strict.ok and strict.reason.startswith("unreachable: step")  # where the turn meets the limit
    either = CartesianIk(arm).plan(wrist_near_limit, start, goal, wanted, 0.006)
    assert either.ok and either.rotation is not None and either.joints is not None
    assert np.allclose(either.rotation, wanted @ np.diag([-1.0, -1.0, 1.0]))  # the same grasp, half turned
    assert np.allclose(arm.forward(either.joints[-1])[1], either.rotation, atol=1e-2)
    easy = turned(rotation, 1.0)  # reachable as asked, and nearer than its half turn: kept
    kept = CartesianIk(arm).plan(wrist_near_limit, start, goal, easy, 0.006)
    assert kept.ok and kept.rotation is not None and np.allclose(kept.rotation, easy)


def test_the_tool_turns_to_the_paths_rotation_within_the_shared_limit(arm: ArmKinematics) -> None:
    """Recovery turns the tool gradually, at half the drivers' per-step turn limit: a 1.5 rad
    turn over a 3 cm path (5 steps) turns in place first, then moves; the chunk is within the
    shared limits and no joint flips."""
    start, rotation = arm.forward(HOME)
    goal = np.array([start + np.array([0.0, 0.03, 0.0])])
    wanted = turned(rotation, 1.5)
    turn_rad = recovery_turn_rad(0.05)
    assert turn_rad == pytest.approx(LIMITS.turn_limit_rad(0.05) / 2)
    plan = CartesianIk(arm, symmetric_tool=False).plan(HOME, start, goal, wanted, 0.006, turn_rad=turn_rad)
    assert plan.ok and plan.rotations is not None and plan.joints is not None
    steps = np.concatenate([rotation[None], plan.rotations])
    turns = [rotation_angle(a, b) for a, b in itertools.pairwise(steps)]
    assert max(turns) <= turn_rad + 1e-9 and len(plan.positions) == 20  # 1.5 rad at 0.075 rad per step
    assert np.allclose(plan.positions[:15], start) and np.allclose(plan.positions[-1], goal[0])  # in place first
    assert np.allclose(plan.rotations[-1], wanted)
    assert np.abs(np.diff(np.vstack([HOME, plan.joints]), axis=0)).max() < LIMITS.joint_step_limit_rad(0.05)
    chunk = recovery_chunk(1, "s", plan.positions, plan.rotations, 1.0, dt=0.05, stamp_s=0.0)
    assert chunk.convention == Convention.ABSOLUTE
    check_limits(chunk)
    held = recovery_chunk(1, "s", plan.positions[:3], wanted, 1.0, dt=0.05, stamp_s=0.0)  # one rotation held
    assert np.allclose(held.rotations, held.rotations[0])
