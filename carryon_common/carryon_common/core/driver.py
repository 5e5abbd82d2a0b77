"""What every robot driver shares (sim_node's simulated arm, arm_adapter_node's real one):
the checks before a released chunk is queued, the driver's state, why a step was refused,
and the default box the tool centre point must stay in."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from carryon_common.core.chunk import WORLD_FRAME, Chunk, InvalidChunk

# Reachable box for the tool centre point, metres, `world` frame (above the table top).
WORKSPACE_MIN = (0.15, -0.6, 0.425)
WORKSPACE_MAX = (0.95, 0.6, 1.2)


class DriverState(enum.StrEnum):
    IDLE = "idle"  # nothing to execute
    EXECUTING = "executing"
    HOLDING = "holding"  # stopped by the watchdog, a refused step, stale state or the e-stop


@dataclass(frozen=True)
class Rejection:
    """A step a driver refused (chunk_id / step -1: not about one step), and why."""

    chunk_id: int
    step: int
    reason: str


def check_executable(chunk: Chunk, *, estop: bool) -> None:
    """What a robot driver checks before it queues a released chunk; InvalidChunk says why not."""
    chunk.validate()
    if chunk.frame_id != WORLD_FRAME:
        raise InvalidChunk(f"frame {chunk.frame_id!r} is not supported (expected {WORLD_FRAME!r})")
    if estop:
        raise InvalidChunk("emergency stop engaged")
