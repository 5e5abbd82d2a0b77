"""Helpers of the shield's unit tests: a downward tool, obstacle sets, chunks, shields."""

from __future__ import annotations

import numpy as np

from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_shield.core.filter import GeometricShield, RetreatParams, Snapshot, Thresholds
from carryon_shield.core.geometry import GripperGeometry
from carryon_shield.core.response import ResponseModel
from carryon_shield.core.types import ObstacleSet, RobotState

# Tool pointing down, fingers along world y (as the stand-in holds it).
DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
DOWN_ROTVEC = np.array([np.pi / np.sqrt(2), np.pi / np.sqrt(2), 0.0])


def obstacles_at(points: list[list[float]] | np.ndarray, name: str = "bottle") -> ObstacleSet:
    array = np.asarray(points, dtype=np.float64).reshape(-1, 3)
    return ObstacleSet(array, np.ones(len(array), dtype=np.int32), ("unknown", name), 0.0, "world")


def state_at(position: list[float], *, width: float = 0.08, command: float = 0.0) -> RobotState:
    return RobotState(np.asarray(position, dtype=np.float64), DOWN, np.zeros(3), width, command, 0.0)


def line_chunk(start: list[float], step: list[float], n: int, *, frame: str = "world") -> Chunk:
    positions = np.asarray(start) + np.outer(np.arange(1, n + 1), np.asarray(step))
    return Chunk(7, "s1", ChunkSource.POLICY, Convention.ABSOLUTE, frame, 0.05, 3, 0.0, positions,
                 np.tile(DOWN_ROTVEC, (n, 1)), np.zeros(n))  # fmt: skip


def make_shield(obstacles: ObstacleSet, state: RobotState, **kwargs: object) -> GeometricShield:
    """A shield deciding from one fixed snapshot, with the lag-free response model."""
    snapshot = Snapshot(obstacles, state, GripperGeometry.build(state.gripper_width_m), False)
    return GeometricShield(lambda _now: snapshot, ResponseModel.identity(), Thresholds(), RetreatParams(),
                           **kwargs)  # type: ignore[arg-type]  # fmt: skip
