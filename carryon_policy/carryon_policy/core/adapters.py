"""Adapters between the robot and a real VLA: what the VLA reads, and how its raw actions
become a `PolicyOutput`.

Every VLA was trained on some robot's data, with its own observation keys, image sizes,
state layout and action convention. These adapters map, from configuration
(`RemoteBackendConfig`'s `vla_*` fields):

* robot cameras -> the policy's image keys, resized (`ObservationMapper.images`);
* robot state -> the policy's state vectors, assembled from named parts
  (`ObservationMapper.states`);
* the policy's raw action array (H, D) -> end-effector commands (`ActionMapper.to_output`),
  for end-effector deltas (per step or relative to the observed pose), absolute poses,
  or joint targets (through an injected `Kinematics`).

State and action layouts name their parts in order; part sizes are fixed except `joints`,
which has as many values as the robot reports joint positions:

| part | size | meaning |
|---|---|---|
| ee_pos | 3 | tool-centre-point position, metres |
| ee_rotvec | 3 | orientation as a rotation vector, radians |
| ee_euler_xyz | 3 | extrinsic roll, pitch, yaw, radians |
| ee_quat_wxyz / ee_quat_xyzw | 4 | orientation quaternion |
| ee_rot6d | 6 | first two columns of the rotation matrix |
| joints | n | arm joint positions, radians |
| gripper | 1 | state: closedness, 0 open .. 1 closed; action: raw command (see vla_gripper_*) |
| gripper_width | 1 | state only: finger opening, metres |
| gripper_fingers | 2 | state only: finger positions +width/2, -width/2, metres (LIBERO's gripper qpos) |
| skip | 1 | action only: a value the adapter ignores |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
from PIL import Image

from carryon_common.core.chunk import Convention
from carryon_common.core.errors import ConfigError
from carryon_policy.core import rotations
from carryon_policy.core.policy import (
    FloatArray,
    ImageArray,
    InvalidAction,
    MissingObservation,
    Observation,
    PolicyMetadata,
    PolicyOutput,
    RobotState,
)

if TYPE_CHECKING:
    from carryon_policy.core.remote_config import RemoteBackendConfig

# Raw action conventions a VLA may use (vla_action_convention).
ACTION_CONVENTIONS = ("ee_delta", "ee_relative", "ee_absolute", "joint_delta", "joint_absolute")
IMAGE_RESIZE_MODES = ("pad", "stretch")
ACTION_FRAMES = ("base", "tool")

_ROTATION_PARTS = {"ee_rotvec": 3, "ee_euler_xyz": 3, "ee_quat_wxyz": 4, "ee_quat_xyzw": 4, "ee_rot6d": 6}
# Part sizes; None = one value per arm joint.
STATE_PARTS: dict[str, int | None] = {
    "ee_pos": 3, **_ROTATION_PARTS, "joints": None, "gripper": 1, "gripper_width": 1, "gripper_fingers": 2,
}  # fmt: skip
ACTION_PARTS: dict[str, int | None] = {"ee_pos": 3, **_ROTATION_PARTS, "joints": None, "gripper": 1, "skip": 1}

# A raw gripper command may overshoot its open/closed values by this fraction of the range
# (regression heads do); it is clipped. Further out, the chunk is dropped as out of range.
GRIPPER_MARGIN = 0.1


class Kinematics(Protocol):
    """Forward kinematics of the arm (MuJoCo in simulation, Pinocchio on a robot PC)."""

    def forward(self, joint_positions: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Tool-centre-point pose for arm joint positions (n,) radians: position (3,) metres
        and rotation matrix (3, 3), in the robot's base frame (RobotState's frame)."""
        ...


# --- parsing the configuration ------------------------------------------------------------


@dataclass(frozen=True)
class CameraBinding:
    """One image the VLA reads: `policy_key` in its request <- robot camera `camera`."""

    policy_key: str
    camera: str


@dataclass(frozen=True)
class StateBinding:
    """One state vector the VLA reads: `policy_key` <- concatenation of `parts`."""

    policy_key: str
    parts: tuple[str, ...]


def _split_binding(entry: str, what: str) -> tuple[str, str]:
    key, sep, value = entry.partition("=")
    key, value = key.strip(), value.strip()
    if not sep or not key or not value:
        raise ValueError(f"{what} entry {entry!r} must look like '<policy key>=<value>'")
    return key, value


def parse_camera_map(entries: Sequence[str]) -> tuple[CameraBinding, ...]:
    """'<policy key>=<robot camera>' entries -> bindings. Raises ValueError on a bad entry."""
    bindings = tuple(CameraBinding(*_split_binding(e, "vla_cameras")) for e in entries)
    _no_duplicate_keys([b.policy_key for b in bindings], "vla_cameras")
    return bindings


def parse_state_map(entries: Sequence[str]) -> tuple[StateBinding, ...]:
    """'<policy key>=<part>+<part>...' entries -> bindings. Raises ValueError on a bad entry."""
    bindings = []
    for entry in entries:
        key, value = _split_binding(entry, "vla_state")
        parts = tuple(p.strip() for p in value.split("+"))
        for part in parts:
            if part not in STATE_PARTS:
                raise ValueError(f"vla_state: unknown part {part!r} in {entry!r}; valid: {', '.join(STATE_PARTS)}")
        bindings.append(StateBinding(key, parts))
    _no_duplicate_keys([b.policy_key for b in bindings], "vla_state")
    return tuple(bindings)


def _no_duplicate_keys(keys: list[str], what: str) -> None:
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    if duplicates:
        raise ValueError(f"{what}: policy key(s) {', '.join(duplicates)} given more than once")


def parse_action_layout(parts: Sequence[str], convention: str) -> tuple[str, ...]:
    """Check an action layout against its convention. Raises ValueError with the reason."""
    for part in parts:
        if part not in ACTION_PARTS:
            raise ValueError(f"vla_action_layout: unknown part {part!r}; valid: {', '.join(ACTION_PARTS)}")
    for part in set(parts) - {"skip"}:
        if parts.count(part) > 1:
            raise ValueError(f"vla_action_layout: part {part!r} appears more than once")
    rotation_parts = [p for p in parts if p in _ROTATION_PARTS]
    if len(rotation_parts) > 1:
        raise ValueError(f"vla_action_layout: more than one rotation part ({', '.join(rotation_parts)})")
    if convention.startswith("ee_"):
        if "ee_pos" not in parts:
            raise ValueError(f"vla_action_layout: convention {convention!r} needs an 'ee_pos' part")
        if "joints" in parts:
            raise ValueError(f"vla_action_layout: convention {convention!r} cannot have a 'joints' part")
    else:
        if "joints" not in parts:
            raise ValueError(f"vla_action_layout: convention {convention!r} needs a 'joints' part")
        extra = [p for p in parts if p.startswith("ee_")]
        if extra:
            raise ValueError(f"vla_action_layout: convention {convention!r} cannot have {', '.join(extra)}")
    return tuple(parts)


# --- observations -------------------------------------------------------------------------


def resize_image(image: ImageArray, height: int, width: int, mode: str) -> ImageArray:
    """(h, w, 3) uint8 -> (height, width, 3) uint8. mode 'pad' keeps the aspect ratio and
    pads with black around the centred image (openpi's resize_with_pad); 'stretch' does not."""
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image
    source = Image.fromarray(image)
    if mode == "stretch":
        return np.asarray(source.resize((width, height), Image.Resampling.BILINEAR), dtype=np.uint8)
    scale = min(height / h, width / w)
    new_h, new_w = max(1, round(h * scale)), max(1, round(w * scale))
    scaled = np.asarray(source.resize((new_w, new_h), Image.Resampling.BILINEAR), dtype=np.uint8)
    out = np.zeros((height, width, 3), dtype=np.uint8)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    out[top : top + new_h, left : left + new_w] = scaled
    return out


def gripper_closedness(robot: RobotState, max_width_m: float) -> float:
    """Normalised gripper state, 0 = fully open (max_width_m) .. 1 = closed."""
    return float(np.clip(1.0 - robot.gripper_width_m / max_width_m, 0.0, 1.0))


def state_part(robot: RobotState, part: str, gripper_max_width_m: float) -> FloatArray:
    """One named part of the robot state as a float64 vector (see the module's table)."""
    rotation = np.asarray(robot.ee_rotation, dtype=np.float64)
    if part == "ee_pos":
        return np.asarray(robot.ee_position, dtype=np.float64).reshape(3)
    if part == "ee_rotvec":
        return rotations.matrix_to_rotvec(rotation)
    if part == "ee_euler_xyz":
        return rotations.matrix_to_euler_xyz(rotation)
    if part == "ee_quat_wxyz":
        return rotations.matrix_to_quat_wxyz(rotation)
    if part == "ee_quat_xyzw":
        return np.roll(rotations.matrix_to_quat_wxyz(rotation), -1)
    if part == "ee_rot6d":
        return rotations.matrix_to_rot6d(rotation)
    if part == "joints":
        if len(robot.joint_positions) == 0:
            raise MissingObservation("the VLA reads joint positions, but the robot state has none")
        return np.asarray(robot.joint_positions, dtype=np.float64).reshape(-1)
    if part == "gripper":
        return np.array([gripper_closedness(robot, gripper_max_width_m)])
    if part == "gripper_width":
        return np.array([robot.gripper_width_m])
    if part == "gripper_fingers":
        return np.array([robot.gripper_width_m / 2.0, -robot.gripper_width_m / 2.0])
    raise ValueError(f"unknown state part {part!r}")


class ObservationMapper:
    """Robot observation -> the images and state vectors a VLA reads, under its keys.

    image_size: (height, width) every image is resized to, or None to send images as
    captured; `sizes` overrides it per policy key (a checkpoint's own input shapes).
    """

    def __init__(
        self,
        cameras: Sequence[CameraBinding],
        states: Sequence[StateBinding],
        *,
        image_size: tuple[int, int] | None,
        resize_mode: str,
        gripper_max_width_m: float,
        sizes: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        self.cameras = tuple(cameras)
        self.state_bindings = tuple(states)
        self._image_size = image_size
        self._resize_mode = resize_mode
        self._gripper_max_width_m = gripper_max_width_m
        self._sizes = dict(sizes or {})

    @classmethod
    def from_config(
        cls, config: RemoteBackendConfig, sizes: Mapping[str, tuple[int, int]] | None = None
    ) -> ObservationMapper:
        size = (config.vla_image_size[0], config.vla_image_size[1]) if config.vla_image_size else None
        return cls(
            parse_camera_map(config.vla_cameras),
            parse_state_map(config.vla_state),
            image_size=size,
            resize_mode=config.vla_image_resize,
            gripper_max_width_m=config.vla_gripper_max_width_m,
            sizes=sizes,
        )

    @property
    def robot_cameras(self) -> tuple[str, ...]:
        """Robot camera names the VLA reads, in configuration order, without repeats."""
        return tuple(dict.fromkeys(b.camera for b in self.cameras))

    def images(self, observation: Observation) -> dict[str, ImageArray]:
        """Policy key -> (H, W, 3) uint8 RGB, resized. Raises MissingObservation."""
        out = {}
        for binding in self.cameras:
            image = observation.images.get(binding.camera)
            if image is None:
                have = ", ".join(sorted(observation.images)) or "none"
                raise MissingObservation(
                    f"camera {binding.camera!r} (VLA input {binding.policy_key!r}) is missing from the "
                    f"observation (cameras present: {have})"
                )
            if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
                raise MissingObservation(
                    f"camera {binding.camera!r} image is {image.dtype} {image.shape}, expected (H, W, 3) uint8 RGB"
                )
            size = self._sizes.get(binding.policy_key, self._image_size)
            out[binding.policy_key] = resize_image(image, size[0], size[1], self._resize_mode) if size else image
        return out

    def states(self, observation: Observation) -> dict[str, FloatArray]:
        """Policy key -> state vector (float64). Raises MissingObservation."""
        return {
            b.policy_key: np.concatenate([state_part(observation.robot, p, self._gripper_max_width_m) for p in b.parts])
            for b in self.state_bindings
        }


# --- actions ------------------------------------------------------------------------------


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
        rotation_part = next((p for p in self.layout if p in _ROTATION_PARTS), None)
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
