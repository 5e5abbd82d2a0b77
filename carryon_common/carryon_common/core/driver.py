"""What every robot driver shares (sim_node's simulated arm, arm_adapter_node's real one):
the checks before a released chunk is queued, the driver's state, why a step was refused,
and the default box the tool centre point must stay in."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from carryon_common.core.chunk import WORLD_FRAME, Chunk, Convention, InvalidChunk
from carryon_common.core.config import NodeConfig

# Reachable box for the tool centre point, metres, `world` frame (above the table top).
WORKSPACE_MIN = (0.15, -0.6, 0.425)
WORKSPACE_MAX = (0.95, 0.6, 1.2)


@dataclass(frozen=True)
class MotionLimits:
    """Hard limits on what may be executed, whoever sent it: the shield refuses a chunk
    beyond them (REJECTED_INVALID) and every driver checks them again, the chunk when it
    is queued and each step before it is executed.

    The defaults leave room for every policy CarryOn runs (chunks of 8 to 100 steps at
    10-50 Hz, recovery at 0.12 m/s) and stop what no arm should do: a 10,000-step chunk,
    `dt` of a day, a 35 cm jump between two steps (3 m/s at 20 Hz)."""

    max_steps: int = 200  # steps in one chunk
    min_dt_s: float = 0.005  # seconds per step
    max_dt_s: float = 0.5
    max_step_m: float = 0.05  # tool translation from one target to the next
    max_speed_m_s: float = 1.0  # that translation over the chunk's dt


LIMITS = MotionLimits()


def check_limits(chunk: Chunk, limits: MotionLimits = LIMITS) -> None:
    """The chunk-level limits (InvalidChunk says which). Step sizes are checked between the
    chunk's own steps (each DELTA step; consecutive ABSOLUTE ones); the first ABSOLUTE step
    against the previous target is each driver's (`step_beyond_limits`)."""
    if len(chunk) > limits.max_steps:
        raise InvalidChunk(f"{len(chunk)} steps: more than the limit of {limits.max_steps} in one chunk")
    if not limits.min_dt_s <= chunk.dt <= limits.max_dt_s:
        raise InvalidChunk(f"dt {chunk.dt:g} s is outside the limits [{limits.min_dt_s:g}, {limits.max_dt_s:g}] s")
    positions = np.asarray(chunk.positions, dtype=np.float64)
    moves = positions if chunk.convention == Convention.DELTA else np.diff(positions, axis=0)
    if len(moves):
        lengths = np.linalg.norm(moves, axis=1)
        worst = int(np.argmax(lengths))
        step = worst if chunk.convention == Convention.DELTA else worst + 1
        reason = _too_far(float(lengths[worst]), chunk.dt, limits)
        if reason is not None:
            raise InvalidChunk(f"step {step}: {reason}")


def step_beyond_limits(
    previous: npt.NDArray[np.float64], target: npt.NDArray[np.float64], dt: float, limits: MotionLimits = LIMITS
) -> str | None:
    """Why a driver must not go from the `previous` tool target to `target` in one step of
    `dt` seconds, or None."""
    return _too_far(float(np.linalg.norm(np.asarray(target) - np.asarray(previous))), dt, limits)


def _too_far(length_m: float, dt: float, limits: MotionLimits) -> str | None:
    # Written so that NaN lengths and NaN, zero or negative dt fail the checks (fail closed).
    if not length_m <= limits.max_step_m:
        return f"the tool would move {length_m * 1000:.0f} mm in one step (limit {limits.max_step_m * 1000:.0f} mm)"
    if not (dt > 0.0 and length_m <= limits.max_speed_m_s * dt):
        speed = length_m / dt if dt > 0.0 else math.inf
        return f"the tool would move at {speed:.2f} m/s (limit {limits.max_speed_m_s:g} m/s)"
    return None


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


def check_executable(chunk: Chunk, *, estop: bool, limits: MotionLimits = LIMITS) -> None:
    """What a robot driver checks before it queues a released chunk; InvalidChunk says why not."""
    if estop:
        raise InvalidChunk("emergency stop engaged")
    chunk.validate()
    if chunk.frame_id != WORLD_FRAME:
        raise InvalidChunk(f"frame {chunk.frame_id!r} is not supported (expected {WORLD_FRAME!r})")
    check_limits(chunk, limits)


class DriverCommandConfig(NodeConfig):
    """What every robot driver's config has for the commands it accepts (carryon_common.core.command_auth)."""

    command_key_file: str = Field(
        "",
        description=(
            "File with the key the shield signs released chunks and e-stop states with ('' = none given: "
            "`carryon up` and the launch file make a per-run key; a node started alone verifies nothing)."
        ),
    )
    estop_latch_file: str = Field(
        "",
        description=(
            "Where the driver keeps its latched e-stop across restarts ('' = <run folder>/state/<node>-estop.json "
            "under `carryon up`, else memory only)."
        ),
    )
    guard_rate_hz: float = Field(
        100.0,
        gt=0.0,
        le=1000.0,
        description=(
            "How often the driver checks its e-stop latch and the shield's heartbeat, between chunk steps too, Hz "
            "(at least control_rate_hz: a stop waits for no step)."
        ),
    )
    shield_heartbeat_pause_s: float = Field(
        0.06,
        gt=0.0,
        le=5.0,
        description=(
            "With a command key: when the shield's signed heartbeat is older than this the driver takes no new "
            "step (sim_node ends the step in progress, arm_adapter_node stops at the measured joints), keeping the "
            "rest of the chunk, and goes on if the heartbeat returns before shield_heartbeat_timeout_s (a late beat "
            "on a loaded machine costs a pause, not the chunk), seconds."
        ),
    )
    shield_heartbeat_timeout_s: float = Field(
        0.4,
        gt=0.0,
        le=5.0,
        description=(
            "With a command key: when the shield's signed heartbeat is older than this the chunk ends and the arm "
            "holds (the shield is taken for frozen or dead; the arm stopped at shield_heartbeat_pause_s), seconds."
        ),
    )

    command_max_age_s: float = Field(
        1.0,
        gt=0.0,
        le=10.0,
        description=(
            "With a command key: a released chunk or e-stop state is refused when its stamp (the shield's clock) "
            "is further than this from the driver's clock (an old or replayed command; on two PCs keep the clocks "
            "synchronised well within it), seconds."
        ),
    )

    max_clock_jump_back_s: float = Field(
        0.1,
        gt=0.0,
        le=10.0,
        description=(
            "The driver's clock going back by more than this engages its e-stop until an operator releases it "
            "(a clock set back makes captured commands look fresh; a simulator reset an operator asked for is "
            "not a jump), seconds."
        ),
    )

    @model_validator(mode="after")
    def _pause_before_timeout(self) -> DriverCommandConfig:
        if self.shield_heartbeat_pause_s > self.shield_heartbeat_timeout_s:
            raise ValueError(
                f"shield_heartbeat_pause_s ({self.shield_heartbeat_pause_s}) must not exceed "
                f"shield_heartbeat_timeout_s ({self.shield_heartbeat_timeout_s})"
            )
        return self
