"""The shield's gate: which chunks may even be considered, and the decision record.

The gate fails closed. A chunk reaches the robot only when it is valid, fresh, the
emergency stop is released, and a collision filter approved it; with no filter
configured nothing is released at all, and an exception inside the filter releases
nothing either (the decision names it; `error` carries it for the caller to log). What
the filter releases (the chunk, a prefix, its own retreat) is held to the motion limits
again before it leaves.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from carryon_common.core.chunk import Chunk, InvalidChunk
from carryon_common.core.driver import check_limits


class Decision(enum.IntEnum):
    """Mirrors ShieldEvent.DECISION_*."""

    RELEASED_ALL = 0
    RELEASED_PREFIX = 1
    RETREAT = 2
    REJECTED_STALE = 3
    REJECTED_NO_PERCEPTION = 4
    REJECTED_ESTOP = 5
    REJECTED_INVALID = 6


@dataclass(frozen=True)
class ShieldDecision:
    """What the shield did with one chunk. Distances in metres, points in `frame_id`."""

    chunk_id: int
    subtask_id: str
    decision: Decision
    released_steps: int
    total_steps: int
    threshold_m: float
    reason: str
    min_distance_m: float = math.inf
    first_blocked_step: int = -1
    blocking_obstacle: str = ""
    blocking_point: tuple[float, float, float] = (0.0, 0.0, 0.0)
    frame_id: str = ""
    holding: bool = False
    obstacle_points: int = 0
    compute_time_s: float = 0.0
    released: Chunk | None = None  # what goes to the driver (None: nothing)
    # For operators (markers): predicted tool path (n, 3) of the incoming chunk, the
    # retreat's path (r, 3), nearest obstacle points (k, 3); world frame, metres.
    predicted_path: npt.NDArray[np.float64] | None = None
    retreat_path: npt.NDArray[np.float64] | None = None
    nearest_points: npt.NDArray[np.float64] | None = None
    # the arm's spheres (S, 4: x, y, z, r) at the first configuration a link blocked, if one did
    arm_spheres: npt.NDArray[np.float64] | None = None
    would_block: bool = False  # filter disabled (ablation): it would have held back steps
    error: BaseException | None = None  # an exception inside the filter (nothing released)


# A collision filter: given a fresh, valid chunk and the time now (seconds, node clock),
# returns the decision.
ChunkFilter = Callable[[Chunk, float], ShieldDecision]


@dataclass
class ShieldGate:
    """Pre-checks every chunk and hands the survivors to the collision filter.

    `max_observation_age_s`: chunks whose observation is older are rejected;
    `threshold_m`: recorded in every decision. Times are seconds on the node clock.
    """

    max_observation_age_s: float
    threshold_m: float
    chunk_filter: ChunkFilter | None = None
    estop_active: bool = False

    def reject(self, chunk_id: int, subtask_id: str, total: int, decision: Decision, reason: str) -> ShieldDecision:
        return ShieldDecision(chunk_id, subtask_id, decision, 0, total, self.threshold_m, reason)

    def decide(self, chunk: Chunk, now_s: float) -> ShieldDecision:
        total = len(chunk)
        if self.estop_active:
            return self.reject(
                chunk.chunk_id, chunk.subtask_id, total, Decision.REJECTED_ESTOP, "emergency stop engaged"
            )
        try:
            chunk.validate()
            check_limits(chunk)  # what no driver would execute either (carryon_common.core.driver)
        except InvalidChunk as exc:
            return self.reject(chunk.chunk_id, chunk.subtask_id, total, Decision.REJECTED_INVALID, str(exc))
        age = now_s - chunk.observation_stamp_s
        if not abs(age) <= self.max_observation_age_s:  # NaN stamps are no fresh observation either
            return self.reject(
                chunk.chunk_id,
                chunk.subtask_id,
                total,
                Decision.REJECTED_STALE,
                f"observation {chunk.observation_id} is {age:.3f} s old (limit {self.max_observation_age_s:.3f} s)",
            )
        if self.chunk_filter is None:
            return self.reject(
                chunk.chunk_id,
                chunk.subtask_id,
                total,
                Decision.REJECTED_NO_PERCEPTION,
                "no collision filter configured: failing closed, nothing released",
            )
        try:
            decision = self.chunk_filter(chunk, now_s)
        except Exception as exc:  # noqa: BLE001 - fail closed on any filter bug, and say so
            decision = self.reject(
                chunk.chunk_id,
                chunk.subtask_id,
                total,
                Decision.REJECTED_NO_PERCEPTION,
                f"shield internal error, nothing released: {type(exc).__name__}: {exc}",
            )
            return dataclasses.replace(decision, error=exc)
        try:  # what the filter releases (a prefix, its own retreat) is held to the same limits
            if decision.released is not None:
                decision.released.validate()
                check_limits(decision.released)
        except InvalidChunk as exc:
            reason = f"the filter's {decision.decision.name.lower()} is beyond the motion limits: {exc}"
            return self.reject(chunk.chunk_id, chunk.subtask_id, total, Decision.REJECTED_INVALID, reason)
        return decision
