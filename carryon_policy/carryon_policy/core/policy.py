"""The `Policy` interface every VLA backend implements, and the data it exchanges.

A policy is frozen: CarryOn never trains it. The policy node gives it one instruction
(`reset`), then asks it for a chunk of end-effector commands per observation (`infer`).
Backends differ in how they are reached (scripted in-process, a remote server, a local
checkpoint) and in their native action convention; adapters (core/observation_mapping.py,
core/action_mapping.py) map their raw actions to `PolicyOutput`, which the node stamps
into an `ActionChunk`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from carryon_common.core.chunk import Convention
from carryon_common.core.errors import CarryOnError

FloatArray = npt.NDArray[np.float64]
ImageArray = npt.NDArray[np.uint8]


class PolicyError(CarryOnError):
    """A policy backend cannot produce actions (base class)."""


class UnknownInstruction(PolicyError):
    """The backend does not know this instruction; `known` lists the ones it does."""

    def __init__(self, instruction: str, known: tuple[str, ...], reason: str = "") -> None:
        self.instruction = instruction
        self.known = known
        why = f" ({reason})" if reason else ""
        listed = "; ".join(repr(k) for k in known) if known else "(none)"
        super().__init__(f"unknown instruction {instruction!r}{why}; known skills: {listed}")


class PolicyUnavailable(PolicyError):
    """A remote server is down, slow or speaks another protocol; or a checkpoint cannot load."""


class InvalidAction(PolicyError):
    """The backend returned actions no robot may execute (NaN, out of range, wrong shape)."""


class MissingObservation(PolicyError):
    """The observation lacks something the backend needs (a camera, object poses)."""


@dataclass(frozen=True)
class RobotState:
    """Measured robot state. ee_position: (3,) metres and ee_rotation: (3, 3) rotation
    matrix of the tool centre point in `frame_id`; joint_positions: (n,) radians of the
    arm joints; gripper_width_m: distance between the fingers, metres."""

    ee_position: FloatArray
    ee_rotation: FloatArray
    joint_positions: FloatArray
    gripper_width_m: float
    frame_id: str = "world"


@dataclass(frozen=True)
class ObjectPose:
    """Pose of an object's body frame (its base centre): position (3,) metres and
    quaternion (4,) w, x, y, z, in the world frame."""

    position: FloatArray
    quaternion: FloatArray

    @property
    def yaw(self) -> float:
        """Rotation about the world z axis, radians (objects stand upright on the table)."""
        w, x, y, z = (float(v) for v in self.quaternion)
        return float(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))


@dataclass(frozen=True)
class Observation:
    """What the policy sees for one inference.

    observation_id / stamp_s: identity and acquisition time (node clock, seconds) that
    every chunk computed from it carries. images: camera name -> (H, W, 3) uint8 RGB.
    objects: simulator ground truth (name -> pose) and scene: the simulator's scene name;
    only the simulation stand-in reads them, real VLAs see pixels ("" and {} on a robot).
    steps_executed: control steps executed since `reset`.
    """

    observation_id: int
    stamp_s: float
    robot: RobotState
    images: Mapping[str, ImageArray] = field(default_factory=dict)
    objects: Mapping[str, ObjectPose] = field(default_factory=dict)
    scene: str = ""
    steps_executed: int = 0


@dataclass(frozen=True)
class PolicyOutput:
    """One chunk of commands as the robot reads them.

    positions: (H, 3) metres; rotations: (H, 3) rotation vectors, radians; both in
    `frame_id`, read per `convention` (DELTA: relative to the previous step's target;
    ABSOLUTE: targets). gripper: (H,) in [0, 1], 0 = open. server_infer_s: time a remote
    server reports for the inference (0.0 when none).
    """

    positions: FloatArray
    rotations: FloatArray
    gripper: FloatArray
    convention: Convention
    frame_id: str = "world"
    server_infer_s: float = 0.0

    def __len__(self) -> int:
        return int(self.positions.shape[0])


@dataclass(frozen=True)
class PolicyMetadata:
    """What a backend is. horizon: steps per chunk it produces; cameras: camera names it
    reads (the robot's names, after mapping); scripted: True for stand-ins that are not a
    learned policy (shown in status so nobody mistakes them for a VLA)."""

    backend: str
    description: str
    convention: Convention
    horizon: int
    cameras: tuple[str, ...] = ()
    needs_ground_truth: bool = False
    scripted: bool = False
    instructions: tuple[str, ...] = ()  # instructions it accepts; () = any


class Policy(Protocol):
    """A frozen VLA behind one small interface (openpi's BasePolicy, with metadata)."""

    @property
    def metadata(self) -> PolicyMetadata: ...

    def reset(self, instruction: str, seed: int) -> None:
        """Start an episode on `instruction`. Raises UnknownInstruction or PolicyUnavailable."""

    def infer(self, observation: Observation) -> PolicyOutput:
        """A chunk for this observation. Raises PolicyError subclasses, never returns garbage."""

    def close(self) -> None:
        """Release connections and models."""
