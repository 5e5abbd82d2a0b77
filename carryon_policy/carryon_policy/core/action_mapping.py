"""A real VLA's raw action array (H, D) -> end-effector commands (`ActionMapper.to_output`),
for end-effector deltas (per step or relative to the observed pose), absolute poses, or
joint targets (through an injected `Kinematics`). The action layout names the columns
(parts in core/layout.py); bad chunks are rejected with InvalidAction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from carryon_common.core.chunk import Convention
from carryon_common.core.errors import ConfigError
from carryon_policy.core import rotations
from carryon_policy.core.layout import ACTION_CONVENTIONS, ACTION_PARTS, ROTATION_PARTS, parse_action_layout
from carryon_policy.core.observation_mapping import ObservationMapper, gripper_closedness
from carryon_policy.core.policy import (
    FloatArray,
    InvalidAction,
    MissingObservation,
    Observation,
    PolicyMetadata,
    PolicyOutput,
    RobotState,
)

if TYPE_CHECKING:
    from carryon_policy.core.remote_config import RemoteBackendConfig

# A raw gripper command may overshoot its open/closed values by this fraction of the range
# (regression heads do); it is clipped. Further out, the chunk is dropped as out of range.
GRIPPER_MARGIN = 0.1


class Kinematics(Protocol):
    """Forward kinematics of the arm (MuJoCo in simulation, Pinocchio on a robot PC)."""

    def forward(self, joint_positions: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Tool-centre-point pose for arm joint positions (n,) radians: position (3,) metres
        and rotation matrix (3, 3), in the robot's base frame (RobotState's frame)."""
        ...


class ActionMapper:
    """Raw VLA actions (H, D) -> `PolicyOutput` in the robot's base frame.

    Conventions (`convention`):
    * ee_delta: each step moves the tool from the previous step's target; DELTA output
      (rotation deltas compose on the left, R_k = exp(w_k) R_{k-1}, in the base frame).
    * ee_relative: each step is a pose relative to the observed tool pose; ABSOLUTE output.
    * ee_absolute: each step is a target pose in the base frame; ABSOLUTE output.
    * joint_delta / joint_absolute: joint targets (added to the previous step's, or as
      they are) through forward kinematics; ABSOLUTE output.
    frame ('base' | 'tool'): the frame ee_delta / ee_relative offsets are expressed in.
    Steps beyond `horizon` are dropped; a chunk with NaN, values beyond `max_abs`, or a
    gripper command outside its range is rejected with InvalidAction.
    """

    def __init__(
        self,
        convention: str,
        layout: Sequence[str],
        *,
        horizon: int,
        frame: str = "base",
        position_scale: float = 1.0,
        rotation_scale: float = 1.0,
        joint_scale: float = 1.0,
        max_abs: float = 0.0,
        gripper_open: float = 0.0,
        gripper_closed: float = 1.0,
        gripper_max_width_m: float = 0.08,
        kinematics: Kinematics | None = None,
    ) -> None:
        if convention not in ACTION_CONVENTIONS:
            raise ConfigError(f"vla_action_convention: unknown {convention!r}; valid: {', '.join(ACTION_CONVENTIONS)}")
        try:
            self.layout = parse_action_layout(layout, convention)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if convention.startswith("joint_") and kinematics is None:
            raise ConfigError(
                f"vla_action_convention {convention!r} needs forward kinematics, and none was given to the "
                "backend; use an end-effector convention or start the policy with a Kinematics"
            )
        if gripper_open == gripper_closed:
            raise ConfigError("vla_gripper_open and vla_gripper_closed must differ")
        self.convention = convention
        self.horizon = horizon
        self.frame = frame
        self.position_scale = position_scale
        self.rotation_scale = rotation_scale
        self.joint_scale = joint_scale
        self.max_abs = max_abs
        self.gripper_open = gripper_open
        self.gripper_closed = gripper_closed
        self.gripper_max_width_m = gripper_max_width_m
        self.kinematics = kinematics

    @classmethod
    def from_config(cls, config: RemoteBackendConfig, horizon: int, kinematics: Kinematics | None) -> ActionMapper:
        return cls(
            config.vla_action_convention,
            config.vla_action_layout,
            horizon=horizon,
            frame=config.vla_action_frame,
            position_scale=config.vla_action_position_scale,
            rotation_scale=config.vla_action_rotation_scale,
            joint_scale=config.vla_action_joint_scale,
            max_abs=config.vla_action_max_abs,
            gripper_open=config.vla_gripper_open,
            gripper_closed=config.vla_gripper_closed,
            gripper_max_width_m=config.vla_gripper_max_width_m,
            kinematics=kinematics,
        )

    @property
    def output_convention(self) -> Convention:
        return Convention.DELTA if self.convention == "ee_delta" else Convention.ABSOLUTE

    def width(self, n_joints: int) -> int:
        """Raw values per step the layout reads, for an arm with `n_joints` joints."""
        return sum(n_joints if size is None else size for size in (ACTION_PARTS[p] for p in self.layout))

    def _columns(self, n_joints: int) -> dict[str, slice]:
        columns, start = {}, 0
        for part in self.layout:
            size = ACTION_PARTS[part]
            size = n_joints if size is None else size
            columns[part] = slice(start, start + size)
            start += size
        return columns

    def to_output(self, raw: object, observation: Observation, server_infer_s: float = 0.0) -> PolicyOutput:
        """Map a raw action chunk (H, D) to commands. Raises InvalidAction with the reason."""
        robot = observation.robot
        n_joints = len(robot.joint_positions) if "joints" in self.layout else 0
        if "joints" in self.layout and n_joints == 0:
            raise MissingObservation("joint actions need the robot's joint positions, and the state has none")
        actions = self._checked(raw, n_joints)
        columns = self._columns(n_joints)
        actions = actions[: self.horizon]

        if self.convention.startswith("ee_"):
            positions, rotations_out = self._ee(actions, columns, robot)
        else:
            positions, rotations_out = self._joints(actions, columns, robot)

        if "gripper" in columns:
            g = (actions[:, columns["gripper"].start] - self.gripper_open) / (self.gripper_closed - self.gripper_open)
            bad = np.flatnonzero((g < -GRIPPER_MARGIN) | (g > 1.0 + GRIPPER_MARGIN))
            if bad.size:
                k = int(bad[0])
                raise InvalidAction(
                    f"gripper command {actions[k, columns['gripper'].start]:.3g} at step {k} is outside "
                    f"[{self.gripper_open:g}, {self.gripper_closed:g}] (open, closed)"
                )
            gripper = np.clip(g, 0.0, 1.0)
        else:  # the VLA does not command the gripper: hold it as it is
            gripper = np.full(len(actions), gripper_closedness(robot, self.gripper_max_width_m))
        return PolicyOutput(
            positions=positions,
            rotations=rotations_out,
            gripper=gripper.astype(np.float64),
            convention=self.output_convention,
            frame_id=robot.frame_id,
            server_infer_s=server_infer_s,
        )

    def _checked(self, raw: object, n_joints: int) -> FloatArray:
        if not isinstance(raw, np.ndarray):
            raise InvalidAction(f"actions are {type(raw).__name__}, expected an array (steps, values)")
        if raw.ndim != 2 or raw.shape[0] == 0:
            raise InvalidAction(f"actions have shape {raw.shape}, expected (steps, values) with at least one step")
        if raw.dtype.kind not in "iuf":
            raise InvalidAction(f"actions have dtype {raw.dtype}, expected numbers")
        width = self.width(n_joints)
        if raw.shape[1] < width:
            raise InvalidAction(
                f"actions have {raw.shape[1]} values per step; layout {'+'.join(self.layout)} needs {width}"
            )
        used = np.asarray(raw[:, :width], dtype=np.float64)
        bad = np.argwhere(~np.isfinite(used))
        if bad.size:
            raise InvalidAction(f"actions contain NaN or infinity (step {bad[0][0]}, value {bad[0][1]})")
        if self.max_abs > 0.0:
            over = np.argwhere(np.abs(used) > self.max_abs)
            if over.size:
                k, d = (int(i) for i in over[0])
                raise InvalidAction(
                    f"action value {used[k, d]:.4g} (step {k}, value {d}) exceeds vla_action_max_abs {self.max_abs:g}"
                )
        return used

    def _rotation(self, values: FloatArray, part: str) -> FloatArray:
        """One step's raw rotation part -> rotation matrix (rotvec/euler scaled)."""
        try:
            if part == "ee_rotvec":
                return rotations.rotvec_to_matrix(values * self.rotation_scale)
            if part == "ee_euler_xyz":
                return rotations.euler_xyz_to_matrix(values * self.rotation_scale)
            if part == "ee_quat_wxyz":
                return rotations.quat_wxyz_to_matrix(values)
            if part == "ee_quat_xyzw":
                return rotations.quat_wxyz_to_matrix(np.roll(values, 1))
            return rotations.rot6d_to_matrix(values)
        except ValueError as exc:
            raise InvalidAction(f"invalid rotation in actions: {exc}") from None

    def _ee(self, actions: FloatArray, columns: dict[str, slice], robot: RobotState) -> tuple[FloatArray, FloatArray]:
        steps = len(actions)
        offsets = actions[:, columns["ee_pos"]] * self.position_scale
        rotation_part = next((p for p in self.layout if p in ROTATION_PARTS), None)
        r_obs = np.asarray(robot.ee_rotation, dtype=np.float64)
        p_obs = np.asarray(robot.ee_position, dtype=np.float64).reshape(3)
        if rotation_part is None:
            mats = [np.eye(3) if self.convention != "ee_absolute" else r_obs] * steps
        else:
            mats = [self._rotation(actions[k, columns[rotation_part]], rotation_part) for k in range(steps)]

        positions = np.zeros((steps, 3))
        rotvecs = np.zeros((steps, 3))
        if self.convention == "ee_absolute":
            for k in range(steps):
                positions[k] = offsets[k]
                rotvecs[k] = rotations.matrix_to_rotvec(mats[k])
        elif self.convention == "ee_relative":
            for k in range(steps):
                if self.frame == "tool":
                    positions[k] = p_obs + r_obs @ offsets[k]
                    rotvecs[k] = rotations.matrix_to_rotvec(r_obs @ mats[k])
                else:
                    positions[k] = p_obs + offsets[k]
                    rotvecs[k] = rotations.matrix_to_rotvec(mats[k] @ r_obs)
        elif self.frame == "tool":  # per-step deltas in the moving tool frame -> base-frame deltas
            r_prev = r_obs
            for k in range(steps):
                positions[k] = r_prev @ offsets[k]
                r_next = r_prev @ mats[k]
                rotvecs[k] = rotations.matrix_to_rotvec(r_next @ r_prev.T)
                r_prev = r_next
        else:  # per-step deltas in the base frame: already the robot's DELTA convention
            positions[:] = offsets
            if rotation_part == "ee_rotvec":  # exact, no round trip through a matrix
                rotvecs[:] = actions[:, columns["ee_rotvec"]] * self.rotation_scale
            elif rotation_part is not None:
                for k in range(steps):
                    rotvecs[k] = rotations.matrix_to_rotvec(mats[k])
        return positions, rotvecs

    def _joints(
        self, actions: FloatArray, columns: dict[str, slice], robot: RobotState
    ) -> tuple[FloatArray, FloatArray]:
        assert self.kinematics is not None  # checked in __init__
        q = np.asarray(robot.joint_positions, dtype=np.float64).reshape(-1)
        targets = actions[:, columns["joints"]] * self.joint_scale
        if self.convention == "joint_delta":
            targets = q + np.cumsum(targets, axis=0)
        positions = np.zeros((len(actions), 3))
        rotvecs = np.zeros((len(actions), 3))
        for k, q_k in enumerate(targets):
            position, rotation = self.kinematics.forward(q_k)
            positions[k] = np.asarray(position, dtype=np.float64).reshape(3)
            rotvecs[k] = rotations.matrix_to_rotvec(np.asarray(rotation, dtype=np.float64))
        if not (np.all(np.isfinite(positions)) and np.all(np.isfinite(rotvecs))):
            raise InvalidAction("forward kinematics of the joint targets is not finite")
        return positions, rotvecs


def mapped_metadata(
    backend: str, description: str, observations: ObservationMapper, actions: ActionMapper
) -> PolicyMetadata:
    """What a backend behind these adapters reports: its action convention and horizon
    come from the action mapping, its cameras from the observation mapping."""
    return PolicyMetadata(
        backend=backend,
        description=description,
        convention=actions.output_convention,
        horizon=actions.horizon,
        cameras=observations.robot_cameras,
    )
