"""Action chunks as numpy data (core form of carryon_interfaces/msg/ActionChunk)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.spatial.transform import Rotation

from carryon_common.core.errors import InvalidMessage


class Convention(enum.IntEnum):
    """How a chunk's steps are read; mirrors ActionChunk.CONVENTION_*."""

    DELTA = 0
    ABSOLUTE = 1


class ChunkSource(enum.IntEnum):
    """Who produced a chunk; mirrors ActionChunk.SOURCE_*."""

    POLICY = 0
    RECOVERY = 1
    RETREAT = 2
    OPERATOR = 3


class InvalidChunk(InvalidMessage):
    """A chunk that no consumer may execute (empty, non-finite, wrong shapes, bad dt); a
    malformed ActionChunk message is one too (convert.chunk_from_msg)."""


@dataclass(frozen=True)
class Chunk:
    """End-effector commands for `n` steps.

    positions: (n, 3) metres; rotations: (n, 3) rotation vectors, radians; both in
    `frame_id` and read per `convention`. gripper: (n,) in [0, 1], 0 = open.
    dt: seconds per step. observation_stamp_s: acquisition time of the observation the
    chunk was computed from, seconds on the node clock.
    """

    chunk_id: int
    subtask_id: str
    source: ChunkSource
    convention: Convention
    frame_id: str
    dt: float
    observation_id: int
    observation_stamp_s: float
    positions: npt.NDArray[np.float64]
    rotations: npt.NDArray[np.float64]
    gripper: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.positions.shape[0])

    def validate(self) -> None:
        """Raise InvalidChunk with the reason when the chunk must not be executed."""
        n = len(self)
        if n == 0:
            raise InvalidChunk("chunk has no steps")
        if self.positions.shape != (n, 3) or self.rotations.shape != (n, 3) or self.gripper.shape != (n,):
            raise InvalidChunk(
                f"inconsistent shapes: positions {self.positions.shape}, rotations {self.rotations.shape}, "
                f"gripper {self.gripper.shape}"
            )
        if not (np.isfinite(self.dt) and self.dt > 0.0):
            raise InvalidChunk(f"dt must be a positive number of seconds, got {self.dt}")
        for name, values in (("positions", self.positions), ("rotations", self.rotations), ("gripper", self.gripper)):
            if not np.all(np.isfinite(values)):
                raise InvalidChunk(f"{name} contain NaN or infinity")
        if np.any((self.gripper < 0.0) | (self.gripper > 1.0)):
            raise InvalidChunk("gripper commands must lie in [0, 1]")
        if not self.frame_id:
            raise InvalidChunk("frame_id is empty")


@dataclass(frozen=True)
class ToolTarget:
    """One step of a chunk as an absolute tool target: position (3,) metres and rotation
    (3, 3) in the chunk's frame, gripper command in [0, 1] (0 = open)."""

    chunk_id: int
    step: int
    position: npt.NDArray[np.float64]
    rotation: npt.NDArray[np.float64]
    gripper: float


def tool_targets(
    chunk: Chunk, start_position: npt.NDArray[np.float64], start_rotation: npt.NDArray[np.float64]
) -> list[ToolTarget]:
    """Every step of `chunk` as an absolute target. DELTA steps add to the previous
    target, starting from `start_*` (the last commanded target); ABSOLUTE steps stand alone."""
    rotations = Rotation.from_rotvec(chunk.rotations).as_matrix()
    pos, rot = np.asarray(start_position, dtype=np.float64), np.asarray(start_rotation, dtype=np.float64)
    targets = []
    for i in range(len(chunk)):
        if chunk.convention == Convention.DELTA:
            pos, rot = pos + chunk.positions[i], rotations[i] @ rot
        else:
            pos, rot = chunk.positions[i].astype(np.float64), rotations[i]
        targets.append(ToolTarget(chunk.chunk_id, i, pos.copy(), rot.copy(), float(chunk.gripper[i])))
    return targets


WORLD_FRAME = "world"  # the frame robot drivers (sim_node, arm_adapter_node) execute chunks in
