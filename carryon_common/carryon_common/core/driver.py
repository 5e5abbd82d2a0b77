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
from scipy.spatial.transform import Rotation

from carryon_common.core.chunk import WORLD_FRAME, Chunk, Convention, InvalidChunk
from carryon_common.core.config import NodeConfig

# Reachable box for the tool centre point, metres, `world` frame (above the table top).
WORKSPACE_MIN = (0.15, -0.6, 0.425)
WORKSPACE_MAX = (0.95, 0.6, 1.2)


@dataclass(frozen=True)
class MotionLimits:
    """Hard limits on what may be executed, whoever sent it: the shield refuses a chunk
    beyond them (REJECTED_INVALID) and every driver checks them again, the chunk when it
    is queued and each step before it is executed. This is their one definition: sim_node's
    driver, arm_adapter_node's executor and the shield's gate all read `LIMITS` (a real
    arm's config may only tighten the joint and IK bounds, never loosen them).

    Per step, from the previous commanded target to the next, the tool may move at most
    `max_step_m` and `max_speed_m_s * dt`, turn at most `max_turn_rad` and
    `max_turn_speed_rad_s * dt`, and each arm joint at most `max_joint_step_rad` and
    `max_joint_speed_rad_s * dt`; an IK solution that misses the step's pose by more than
    `max_ik_position_error_m` or `max_ik_rotation_error_rad` is no step at all (the arm would
    end in a pose nothing checked). A NaN anywhere fails every check (fail closed).

    Why these numbers. Translation: room for every policy CarryOn runs (chunks of 8 to 100
    steps at 10-50 Hz, recovery at 0.12 m/s) while stopping a 10,000-step chunk, `dt` of a
    day, a 35 cm jump between two steps (3 m/s at 20 Hz). The rest from what CarryOn's own
    motions did before these limits existed, measured on the simulated driver (every
    executed step of `carryon bench safety --quick --seed 0`: 9,069 scripted stand-in steps
    at 20 Hz with and without the shield, 399 of the shield's retreat; `bench recovery
    --quick --seed 0`: 4,010 stand-in and 576 recovery steps), and in three recorded demo
    graphs (2,800 released policy and 1,450 recovery steps):

    * tool rotation: the stand-ins yaw at 1.5 rad/s (`yaw_rate_rad_s`), their targets turning
      at most 0.128 rad in one step (2.55 rad/s; 99.9 % under 0.085 rad), the retreat 0.009,
      recovery 0.015. The limit, 3.0 rad/s (0.15 rad per step at 20 Hz) and 0.2 rad per step,
      refuses a half turn of the wrist in one step (what sweeps the palm through whatever is
      beside it). In the demo graphs recovery turned the tool up to 1.56 rad in its first
      step (the joints then moved 0.49 rad, 9.7 rad/s): it now turns at half the limit
      (carryon_recovery.core.motion).
    * joints, from the last commanded ones: the stand-ins move a joint at most 0.107 rad in
      one step (joint 5, 2.15 rad/s; joint 4 0.104, joint 7 0.103). The Franka Panda's
      datasheet allows 2.175 rad/s on joints 1-4 and 2.61 rad/s on 5-7; the one value here
      is 2.61 rad/s (0.13 rad per step at 20 Hz; 2.175 would leave the stand-ins 1 % of
      margin), capped at 0.2 rad per step for slow chunks. A real arm's config tightens it.
    * IK: the simulated driver's solutions missed by at most 0.1 mm and 0.0003 rad; the
      bounds, 10 mm (as the drivers had) and 0.05 rad (as recovery's planner has), refuse a
      step that would leave the tool in an orientation nothing checked."""

    max_steps: int = 200  # steps in one chunk
    min_dt_s: float = 0.005  # seconds per step
    max_dt_s: float = 0.5
    max_step_m: float = 0.05  # tool translation from one target to the next
    max_speed_m_s: float = 1.0  # that translation over the chunk's dt
    max_turn_rad: float = 0.2  # tool rotation (angle of the relative rotation) from one target to the next
    max_turn_speed_rad_s: float = 3.0  # that rotation over the chunk's dt
    max_joint_step_rad: float = 0.2  # any arm joint from one commanded target to the next
    max_joint_speed_rad_s: float = 2.61  # that joint motion over dt (the Panda's joints 5-7)
    max_ik_position_error_m: float = 0.01  # how far an IK solution may miss the step's position
    max_ik_rotation_error_rad: float = 0.05  # how far it may miss the step's rotation

    def turn_limit_rad(self, dt: float) -> float:
        """The largest tool turn allowed in one step of `dt` seconds, radians (0 for a dt that
        is not a positive number: nothing may turn)."""
        return min(self.max_turn_rad, self.max_turn_speed_rad_s * dt) if dt > 0.0 else 0.0

    def joint_step_limit_rad(self, dt: float) -> float:
        """The largest motion of any arm joint allowed in one step of `dt` seconds, radians
        (0 for a dt that is not a positive number)."""
        return min(self.max_joint_step_rad, self.max_joint_speed_rad_s * dt) if dt > 0.0 else 0.0


LIMITS = MotionLimits()
# No rotation needs a rotation vector longer than a full turn (as_rotvec gives at most pi), and
# a huge one loses its meaning in floating point: a chunk with one is refused.
FULL_TURN_RAD = 2.0 * math.pi


def check_limits(chunk: Chunk, limits: MotionLimits = LIMITS) -> None:
    """The chunk-level limits (InvalidChunk says which). Step sizes and turns are checked
    between the chunk's own steps (each DELTA step; consecutive ABSOLUTE ones); the first
    ABSOLUTE step against the previous target is each driver's (`step_beyond_limits`,
    `turn_beyond_limits`). Rotation vectors longer than a full turn are refused."""
    if len(chunk) > limits.max_steps:
        raise InvalidChunk(f"{len(chunk)} steps: more than the limit of {limits.max_steps} in one chunk")
    if not limits.min_dt_s <= chunk.dt <= limits.max_dt_s:
        raise InvalidChunk(f"dt {chunk.dt:g} s is outside the limits [{limits.min_dt_s:g}, {limits.max_dt_s:g}] s")
    delta = chunk.convention == Convention.DELTA
    positions = np.asarray(chunk.positions, dtype=np.float64)
    moves = positions if delta else np.diff(positions, axis=0)
    if len(moves):
        lengths = np.linalg.norm(moves, axis=1)
        worst = int(np.argmax(lengths))
        reason = _too_far(float(lengths[worst]), chunk.dt, limits)
        if reason is not None:
            raise InvalidChunk(f"step {worst if delta else worst + 1}: {reason}")
    rotvecs = np.asarray(chunk.rotations, dtype=np.float64)
    if len(rotvecs) and rotvecs.ndim == 2:
        with np.errstate(over="ignore", invalid="ignore"):  # 1e300 squared is inf: refused below
            spans = np.linalg.norm(rotvecs, axis=1)
        worst = int(np.argmax(spans))
        if not spans[worst] <= FULL_TURN_RAD:  # NaN and overflow too
            raise InvalidChunk(f"step {worst}: a rotation vector of {spans[worst]:.3g} rad is longer than a full turn")
    turns = _turns(rotvecs, delta)
    if len(turns):
        worst = int(np.argmax(turns))
        reason = _too_sharp(float(turns[worst]), chunk.dt, limits)
        if reason is not None:
            raise InvalidChunk(f"step {worst if delta else worst + 1}: {reason}")


def step_beyond_limits(
    previous: npt.NDArray[np.float64], target: npt.NDArray[np.float64], dt: float, limits: MotionLimits = LIMITS
) -> str | None:
    """Why a driver must not go from the `previous` tool target to `target` (positions (3,),
    metres) in one step of `dt` seconds, or None."""
    return _too_far(float(np.linalg.norm(np.asarray(target) - np.asarray(previous))), dt, limits)


def turn_beyond_limits(
    previous: npt.NDArray[np.float64], target: npt.NDArray[np.float64], dt: float, limits: MotionLimits = LIMITS
) -> str | None:
    """Why a driver must not turn the tool from the `previous` target rotation to `target`
    (rotation matrices (3, 3), same frame) in one step of `dt` seconds, or None."""
    return _too_sharp(
        rotation_angle(np.asarray(previous, dtype=np.float64), np.asarray(target, dtype=np.float64)), dt, limits
    )


def joint_step_beyond_limits(
    q_previous: npt.NDArray[np.float64], q_next: npt.NDArray[np.float64], dt: float, limits: MotionLimits = LIMITS
) -> str | None:
    """Why a driver must not command the arm joints `q_next` one step of `dt` seconds after
    `q_previous` (radians, same joint order: the last commanded joints, or the measured ones
    when none was commanded), or None."""
    before, after = np.asarray(q_previous, dtype=np.float64), np.asarray(q_next, dtype=np.float64)
    if before.shape != after.shape or before.ndim != 1 or not len(before):
        return f"joint targets of shape {after.shape} do not match the previous ones {before.shape}"
    moves = np.abs(after - before)
    if not np.all(np.isfinite(moves)):
        return "joint targets are not finite"
    if not dt > 0.0:
        return f"dt {dt:g} s is not a positive number of seconds"
    worst = int(np.argmax(moves))
    limit = limits.joint_step_limit_rad(dt)
    if not moves[worst] <= limit:
        return (
            f"joint {worst + 1} would move {moves[worst]:.3f} rad in one step of {dt:g} s (limit {limit:.3f} rad: "
            f"{limits.max_joint_speed_rad_s:g} rad/s, at most {limits.max_joint_step_rad:g} rad)"
        )
    return None


def ik_beyond_limits(position_error_m: float, rotation_error_rad: float, limits: MotionLimits = LIMITS) -> str | None:
    """Why an IK solution that misses its step's pose by `position_error_m` (metres) and
    `rotation_error_rad` (radians) must not be executed, or None."""
    if not position_error_m <= limits.max_ik_position_error_m:
        return (
            f"unreachable: IK error {position_error_m * 1000:.1f} mm "
            f"(limit {limits.max_ik_position_error_m * 1000:.1f} mm)"
        )
    if not rotation_error_rad <= limits.max_ik_rotation_error_rad:
        return (
            f"unreachable: IK rotation error {rotation_error_rad:.3f} rad "
            f"(limit {limits.max_ik_rotation_error_rad:g} rad)"
        )
    return None


def rotation_angle(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> float:
    """The angle of the rotation from `a` to `b` (rotation matrices (3, 3)), radians in
    [0, pi]; NaN when either holds a NaN."""
    cosine = (float(np.trace(a.T @ b)) - 1.0) / 2.0
    return math.nan if math.isnan(cosine) else math.acos(min(1.0, max(-1.0, cosine)))


def _turns(rotvecs: npt.NDArray[np.float64], delta: bool) -> npt.NDArray[np.float64]:
    """The turn of each step, radians: each DELTA rotation's angle; between consecutive
    ABSOLUTE ones, the angle of the rotation from one to the next."""
    count = len(rotvecs) if delta else max(0, len(rotvecs) - 1)
    if not count:
        return np.zeros(0)
    if rotvecs.ndim != 2 or rotvecs.shape[1] != 3 or not np.all(np.isfinite(rotvecs)):
        return np.full(count, math.nan)  # fails every check
    try:
        rotations = Rotation.from_rotvec(rotvecs)
        turns = rotations.magnitude() if delta else (rotations[1:] * rotations[:-1].inv()).magnitude()
    except ValueError:  # numbers scipy cannot make a rotation of
        return np.full(count, math.nan)
    return np.atleast_1d(np.asarray(turns, dtype=np.float64))


def _too_far(length_m: float, dt: float, limits: MotionLimits) -> str | None:
    # Written so that NaN lengths and NaN, zero or negative dt fail the checks (fail closed).
    if not length_m <= limits.max_step_m:
        return f"the tool would move {length_m * 1000:.0f} mm in one step (limit {limits.max_step_m * 1000:.0f} mm)"
    if not (dt > 0.0 and length_m <= limits.max_speed_m_s * dt):
        speed = length_m / dt if dt > 0.0 else math.inf
        return f"the tool would move at {speed:.2f} m/s (limit {limits.max_speed_m_s:g} m/s)"
    return None


def _too_sharp(angle_rad: float, dt: float, limits: MotionLimits) -> str | None:
    # As _too_far: NaN angles and NaN, zero or negative dt fail.
    if not angle_rad <= limits.max_turn_rad:
        return (
            f"the tool would turn {math.degrees(angle_rad):.0f} deg in one step "
            f"(limit {math.degrees(limits.max_turn_rad):.0f} deg)"
        )
    if not (dt > 0.0 and angle_rad <= limits.max_turn_speed_rad_s * dt):
        speed = angle_rad / dt if dt > 0.0 else math.inf
        return f"the tool would turn at {speed:.2f} rad/s (limit {limits.max_turn_speed_rad_s:g} rad/s)"
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
