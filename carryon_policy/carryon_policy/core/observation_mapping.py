"""Robot observation -> what a real VLA reads: robot cameras -> the policy's image keys,
resized (`ObservationMapper.images`); robot state -> the policy's state vectors, assembled
from the named parts of the layout (`ObservationMapper.states`; parts in core/layout.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

from carryon_policy.core import rotations
from carryon_policy.core.layout import CameraBinding, StateBinding, parse_camera_map, parse_state_map
from carryon_policy.core.policy import (
    FloatArray,
    ImageArray,
    MissingObservation,
    Observation,
    RobotState,
)

if TYPE_CHECKING:
    from carryon_policy.core.remote_config import RemoteBackendConfig


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
