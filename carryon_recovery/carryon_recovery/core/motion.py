"""Motion backends of recovery: turn a tool path into the steps recovery sends.

Every backend returns tool poses (Cartesian ABSOLUTE steps in `world`), because recovery's
steps go to the robot the same way the VLA's do: as chunks through the shield, which
releases, trims or blocks them, then to the driver. A backend decides *which* steps:

* `builtin` (`CartesianIk`) — Cartesian interpolation at the recovery speed, and IK of
  every step on the arm's kinematic model (Pinocchio from the URDF in
  `robot/<arm>.yaml`; on the simulated Panda it agrees with the MuJoCo model, see
  carryon_robot's tests), each step seeded with the previous one: a path with an unreachable
  step, or a joint flip, is refused before the arm moves.
* `moveit_py` (`MoveItPlanner`, robot PCs with MoveIt 2) — MoveIt plans a collision-free
  joint path to the goal in its planning scene; its waypoints are turned back into tool
  poses by forward kinematics and sent through the shield like any other step.

Both turn the tool from where it points to the path's rotation gradually, at most
`turn_rad` per step (`recovery_turn_rad`: half the shared per-step turn limit of
carryon_common.core.driver.MotionLimits), along the path's first steps, turning in place
first when the path is too short for the turn: the drivers refuse a step that turns the
tool further, and a half turn in one step would sweep the palm through whatever is beside it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
from scipy.spatial.transform import Rotation, Slerp

from carryon_common.core.chunk import WORLD_FRAME, Chunk, ChunkSource, Convention
from carryon_common.core.driver import LIMITS
from carryon_robot.core.kinematics import ArmKinematics, RobotDescription

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class MotionPlan:
    positions: FloatArray  # (n, 3) tool positions in world, one per control step
    joints: FloatArray | None = None  # (n, dof) the backend's joint solution per step, when it has one
    reason: str = ""  # why the path cannot be executed ("" = it can)
    rotation: FloatArray | None = None  # the tool rotation to move with, when the backend chose an equivalent one
    rotations: FloatArray | None = None  # (n, 3, 3) the tool rotation per step (turning to `rotation`), when planned

    @property
    def ok(self) -> bool:
        return not self.reason


class MotionBackend(Protocol):
    name: str

    def plan(
        self,
        q_start: FloatArray | None,
        start: FloatArray,
        path: FloatArray,
        rotation: FloatArray,
        step_m: float,
        *,
        turn_rad: float = ...,
    ) -> MotionPlan:
        """Steps from the tool at `start` (joints `q_start`, None = unknown) through `path`
        (n, 3) at the tool `rotation`, about `step_m` apart, turning to it at most `turn_rad`
        per step."""


def recovery_turn_rad(dt: float) -> float:
    """How far recovery turns the tool in one step of `dt` seconds, radians: half the shared
    per-step limit (MotionLimits.turn_limit_rad), leaving the drivers' check room for the
    arm's tracking."""
    return 0.5 * LIMITS.turn_limit_rad(dt)


DEFAULT_TURN_RAD = recovery_turn_rad(0.05)  # at recovery's default 20 Hz


def turn_gradually(
    start: FloatArray, start_rotation: FloatArray, samples: FloatArray, rotation: FloatArray, turn_rad: float
) -> tuple[FloatArray, FloatArray]:
    """Positions (m, 3) and rotations (m, 3, 3) that turn the tool from `start_rotation` to
    `rotation` by at most `turn_rad` per step along `samples` (n, 3); when the turn needs more
    steps than the path has, the tool first turns in place at `start`."""
    angle = _angle(np.asarray(start_rotation, dtype=np.float64), np.asarray(rotation, dtype=np.float64))
    turns = math.ceil(angle / turn_rad - 1e-9) if turn_rad > 0.0 else 0
    positions = np.asarray(samples, dtype=np.float64)
    if turns > len(positions):
        positions = np.vstack([np.tile(start, (turns - len(positions), 1)), positions])
    rotations = np.tile(rotation, (len(positions), 1, 1))
    if turns > 0:
        slerp = Slerp([0.0, 1.0], Rotation.from_matrix(np.stack([start_rotation, rotation])))
        rotations[:turns] = slerp(np.arange(1, turns + 1) / turns).as_matrix()
    return positions, rotations


def resample(start: FloatArray, positions: FloatArray, step_m: float) -> FloatArray:
    """The path start -> positions (n, 3) resampled every `step_m` along its length (the
    tool speed times the control period); the last sample is the last position."""
    path = np.vstack([start, positions])
    lengths = np.linalg.norm(np.diff(path, axis=0), axis=1)
    total = float(lengths.sum())
    n = max(1, math.ceil(total / step_m))
    distance = np.concatenate([[0.0], np.cumsum(lengths)])
    wanted = np.linspace(0.0, total, n + 1)[1:]
    out: FloatArray = np.column_stack([np.interp(wanted, distance, path[:, a]) for a in range(3)])
    return out


FLIP = np.diag([-1.0, -1.0, 1.0])  # a half turn about the tool's z axis


def _angle(a: FloatArray, b: FloatArray) -> float:
    return float(np.arccos(np.clip((np.trace(a.T @ b) - 1.0) / 2.0, -1.0, 1.0)))


class CartesianIk:
    """The built-in backend: Cartesian interpolation + IK of every step (see the module).
    With `symmetric_tool` (a parallel gripper grasps the same turned half way round its
    axis) the half-turned rotation is tried too, nearest to the current one first: the
    wrist joint's limits often allow only one of the two."""

    name = "builtin"

    def __init__(
        self,
        kinematics: ArmKinematics,
        *,
        symmetric_tool: bool = True,
        max_ik_error_m: float = LIMITS.max_ik_position_error_m,
        max_rotation_error_rad: float = LIMITS.max_ik_rotation_error_rad,
        max_joint_step_rad: float = 0.3,
    ) -> None:
        self.kinematics = kinematics
        self.symmetric_tool = symmetric_tool
        self.max_ik_error_m = max_ik_error_m
        self.max_rotation_error_rad = max_rotation_error_rad
        self.max_joint_step_rad = max_joint_step_rad

    def plan(
        self,
        q_start: FloatArray | None,
        start: FloatArray,
        path: FloatArray,
        rotation: FloatArray,
        step_m: float,
        *,
        turn_rad: float = DEFAULT_TURN_RAD,
    ) -> MotionPlan:
        samples = resample(start, path, step_m)
        if q_start is None:
            return MotionPlan(samples, reason="no joint states: the path cannot be checked for reachability")
        q0 = np.asarray(q_start, dtype=np.float64)
        current = self.kinematics.forward(q0)[1]
        options = [np.asarray(rotation, dtype=np.float64)]
        if self.symmetric_tool:
            options.append(options[0] @ FLIP)
            options.sort(key=lambda r: _angle(current, r))
        first: MotionPlan | None = None
        for option in options:
            positions, rotations = turn_gradually(start, current, samples, option, turn_rad)
            plan = self._solve(q0, positions, rotations, option)
            if plan.ok:
                return plan
            first = first or plan
        assert first is not None
        return first

    def _solve(self, q0: FloatArray, samples: FloatArray, rotations: FloatArray, rotation: FloatArray) -> MotionPlan:
        joints = np.empty((len(samples), len(q0)))
        q = q0
        for i, position in enumerate(samples):
            solution = self.kinematics.inverse(q, position, rotations[i])
            where = f"step {i + 1}/{len(samples)} at {np.round(position, 3).tolist()} m"
            if solution.position_error_m > self.max_ik_error_m:
                return MotionPlan(samples, reason=f"unreachable: {where} (IK error {solution.position_error_m:.3f} m)")
            if solution.rotation_error_rad > self.max_rotation_error_rad:
                reason = f"unreachable: {where}: the tool rotation misses by {solution.rotation_error_rad:.2f} rad"
                return MotionPlan(samples, reason=reason)
            jump = float(np.max(np.abs(solution.q - q)))
            if jump > self.max_joint_step_rad:  # the tool turns gradually: no step may flip a joint
                return MotionPlan(samples, reason=f"joint flip: {where} moves a joint {jump:.2f} rad in one step")
            joints[i] = q = solution.q
        return MotionPlan(samples, joints, rotation=rotation, rotations=rotations)


def builtin_motion(robot: RobotDescription) -> CartesianIk:
    """The built-in backend for an arm's description."""
    return CartesianIk(robot.kinematics(), symmetric_tool=robot.symmetric_tool)


# moveit_py ---------------------------------------------------------------------------------
PlanJoints = Callable[[FloatArray, FloatArray, FloatArray], tuple[FloatArray | None, str]]


class MoveItPlanner:
    """The `moveit_py` backend. `plan_joints(q_start, goal_position, goal_rotation)` asks
    MoveIt for a joint path ((m, dof) waypoints, or None with the reason); its waypoints
    become tool poses (forward kinematics), resampled at the recovery speed."""

    name = "moveit_py"

    def __init__(self, kinematics: ArmKinematics, plan_joints: PlanJoints) -> None:
        self.kinematics = kinematics
        self.plan_joints = plan_joints

    def plan(
        self,
        q_start: FloatArray | None,
        start: FloatArray,
        path: FloatArray,
        rotation: FloatArray,
        step_m: float,
        *,
        turn_rad: float = DEFAULT_TURN_RAD,
    ) -> MotionPlan:
        if q_start is None:
            return MotionPlan(resample(start, path, step_m), reason="no joint states: MoveIt needs the start state")
        q0 = np.asarray(q_start, dtype=np.float64)
        waypoints, why = self.plan_joints(q0, path[-1], rotation)
        if waypoints is None or len(waypoints) == 0:
            return MotionPlan(resample(start, path, step_m), reason=f"MoveIt found no path: {why}")
        tool = np.array([self.kinematics.forward(q)[0] for q in waypoints])
        current = self.kinematics.forward(q0)[1]
        positions, rotations = turn_gradually(start, current, resample(start, tool, step_m), rotation, turn_rad)
        return MotionPlan(positions, np.asarray(waypoints), rotations=rotations)


def recovery_chunk(
    chunk_id: int,
    subtask_id: str,
    positions: FloatArray,
    rotation: FloatArray,
    gripper: float,
    *,
    dt: float,
    stamp_s: float,
) -> Chunk:
    """The chunk recovery sends for a tool path: `positions` (N, 3) tool positions in world
    (m), the tool `rotation`, one (3, 3) held along it or one per step (N, 3, 3), one
    gripper command; ABSOLUTE steps `dt` seconds apart, stamped `stamp_s` on the caller's clock."""
    rotvec = Rotation.from_matrix(rotation).as_rotvec()
    rotvecs = rotvec.reshape(len(positions), 3) if rotvec.ndim == 2 else np.tile(rotvec, (len(positions), 1))
    return Chunk(
        chunk_id=chunk_id,
        subtask_id=subtask_id,
        source=ChunkSource.RECOVERY,
        convention=Convention.ABSOLUTE,
        frame_id=WORLD_FRAME,
        dt=dt,
        observation_id=0,
        observation_stamp_s=stamp_s,
        positions=positions,
        rotations=rotvecs,
        gripper=np.full(len(positions), gripper),
    )
