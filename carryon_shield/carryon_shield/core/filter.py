"""The geometric filter: release the prefix of a chunk that stays clear, or a retreat.

For every step the response model predicts the tool pose; the hand, finger and (while
holding) carried-object spheres placed there are checked against the obstacle points,
each part with its own distance threshold. The arm also settles at each commanded
target when a prefix ends, so commanded targets are checked too. Steps before the first
violation are released. When the very first step is blocked, a short retreat is released
instead: `retreat_steps` control steps along a direction combining "away from the
nearest obstacle point" with an upward component; the next chunk is then checked again
on fresh observations (paper §3.3.1, appendix C, Fig. 7).

Speed: the distances come from a compiled kernel (`core/kernel.py`) that crops the
obstacle points to the chunk's neighbourhood in one pass and measures only the points near
each pose, stopping at the first violation.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.spatial.transform import Rotation

from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_common.core.driver import LIMITS
from carryon_shield.core.arm import ArmCheck, ArmVerdict
from carryon_shield.core.gate import Decision, ShieldDecision
from carryon_shield.core.geometry import PART_NAMES, GripperGeometry, Part
from carryon_shield.core.kernel import check_kernel
from carryon_shield.core.response import ResponseModel, commanded_poses
from carryon_shield.core.types import FloatArray, ObstacleSet, PerceptionUnavailable, RobotState

UP = np.array([0.0, 0.0, 1.0])


@dataclass(frozen=True)
class Thresholds:
    """Minimum allowed predicted distance per part, metres (paper Table 7 layout)."""

    hand_m: float = 0.02
    fingers_m: float = 0.008
    carried_m: float = 0.015

    def of_part(self) -> FloatArray:
        """Thresholds indexed by Part."""
        return np.array([self.hand_m, self.fingers_m, self.carried_m])


@dataclass(frozen=True)
class RetreatParams:
    steps: int = 3
    distance_m: float = 0.03
    up_weight: float = 1.0


@dataclass(frozen=True)
class Snapshot:
    """What one decision is made from: obstacles, robot state, checked geometry."""

    obstacles: ObstacleSet
    state: RobotState
    geometry: GripperGeometry
    holding: bool


NEAR_RANGE_M = 0.05
"""Exact distances are computed within this range of the gripper; beyond it a clearance is
reported as this value (a lower bound)."""


@dataclass(frozen=True)
class PoseCheck:
    """Clearances of a sequence of n tool poses. clearance (n,): smallest distance of any
    part's surface to an obstacle point, metres, capped at NEAR_RANGE_M (a lower bound there);
    margin (n,): the smallest clearance-minus-threshold over the parts (< 0: violated);
    part (n,): the part with that margin; nearest (n,): the obstacle point behind it (-1:
    none within range). Only the first `checked` poses are measured (a check may stop at the
    first violation); later entries are NaN and count as violated."""

    clearance: FloatArray
    margin: FloatArray
    part: npt.NDArray[np.int64]
    nearest: npt.NDArray[np.int64]
    checked: int

    @property
    def violated(self) -> npt.NDArray[np.bool_]:
        out: npt.NDArray[np.bool_] = ~(self.margin >= 0.0)
        return out


def check_poses(
    obstacles: ObstacleSet,
    geometry: GripperGeometry,
    thresholds: Thresholds,
    positions: FloatArray,
    rotations: FloatArray,
    *,
    stop_at_first: bool = False,
) -> PoseCheck:
    """Check the gripper at n poses (positions (n, 3), rotations (n, 3, 3)) against the
    obstacles: exact point-to-box distances for the hand and fingers, point-to-sphere for
    a carried object, each part against its own threshold (compiled kernel,
    `core/kernel.py`). With `stop_at_first` the poses after the first violation are left
    unmeasured."""
    carried = geometry.box < 0
    clearance, margin, part, nearest, checked = check_kernel(
        obstacles.grid,
        positions,
        rotations,
        boxes=geometry.boxes,
        box_part=geometry.box_part,
        spheres=geometry.spheres[carried],
        sphere_part=geometry.part[carried],
        thresholds=thresholds.of_part(),
        near_range=max(NEAR_RANGE_M, float(thresholds.of_part().max())),
        stop_at_first=stop_at_first,
    )
    return PoseCheck(clearance, margin, part, nearest, checked)


class GeometricShield:
    """The ChunkFilter of shield_node (and of in-process evaluations).

    `perceive(now_s)` returns the Snapshot to decide from, or raises
    PerceptionUnavailable (stale or missing depth, masks or robot state, unknown frames):
    then nothing is released. `enabled=False` (ablation) releases every chunk whole but
    still reports what would have been blocked.
    """

    def __init__(
        self,
        perceive: Callable[[float], Snapshot],
        response: ResponseModel,
        thresholds: Thresholds,
        retreat: RetreatParams,
        *,
        world_frame: str = "world",
        enabled: bool = True,
        arm: ArmCheck | None = None,
    ) -> None:
        self.arm = arm  # None: the hand only (the ablation of the whole-arm shield)
        self.perceive = perceive
        self.response = response
        self.thresholds = thresholds
        self.retreat = retreat
        self.world_frame = world_frame
        self.enabled = enabled

    def _decision(self, chunk: Chunk, decision: Decision, reason: str, **fields: object) -> ShieldDecision:
        return ShieldDecision(
            chunk.chunk_id,
            chunk.subtask_id,
            decision,
            0,
            len(chunk),
            self.thresholds.hand_m,
            reason,
            frame_id=self.world_frame,
            **fields,  # type: ignore[arg-type]
        )

    def __call__(self, chunk: Chunk, now_s: float) -> ShieldDecision:
        started = time.perf_counter()
        if chunk.frame_id != self.world_frame:
            return self._decision(
                chunk,
                Decision.REJECTED_INVALID,
                f"unknown frame {chunk.frame_id!r}: the shield checks chunks in {self.world_frame!r} only",
            )
        try:
            snapshot = self.perceive(now_s)
        except PerceptionUnavailable as exc:
            if not self.enabled:
                return ShieldDecision(
                    chunk.chunk_id,
                    chunk.subtask_id,
                    Decision.RELEASED_ALL,
                    len(chunk),
                    len(chunk),
                    self.thresholds.hand_m,
                    f"shield disabled: released unchecked ({exc})",
                    frame_id=self.world_frame,
                    released=chunk,
                    would_block=True,
                )
            return self._decision(chunk, Decision.REJECTED_NO_PERCEPTION, f"{exc}: failing closed, nothing released")
        decision = self.decide(chunk, snapshot)
        return dataclasses.replace(decision, compute_time_s=time.perf_counter() - started)

    def predict(self, chunk: Chunk, state: RobotState) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Predicted positions (n, 3), commanded positions (n, 3), rotations (n, 3, 3)."""
        base_position = state.commanded_position if state.commanded_position is not None else state.position
        base_rotation = state.commanded_rotation if state.commanded_rotation is not None else state.rotation
        commanded, rotations = commanded_poses(chunk, base_position, base_rotation)
        predicted = self.response.predict(commanded, state.position, state.velocity)
        return predicted, commanded, rotations

    def decide(self, chunk: Chunk, snapshot: Snapshot) -> ShieldDecision:
        obstacles, state, geometry = snapshot.obstacles, snapshot.state, snapshot.geometry
        if self.arm is not None and state.joints is None and self.enabled:
            return self._decision(
                chunk,
                Decision.REJECTED_NO_PERCEPTION,
                "no measured joint states: the arm's links cannot be checked; failing closed, nothing released",
            )
        n = len(chunk)
        predicted, commanded, rotations = self.predict(chunk, state)
        check = check_poses(obstacles, geometry, self.thresholds, predicted, rotations, stop_at_first=True)
        clearance = check.clearance
        blocked = np.flatnonzero(check.violated)
        first = int(blocked[0]) if len(blocked) else n
        blocker = (int(check.nearest[first]), int(check.part[first]), float(clearance[first])) if first < n else None
        # A released prefix ends with the arm settling at its last commanded target: that
        # pose must be clear too, else the prefix shrinks.
        while first > 0:
            settle = check_poses(
                obstacles, geometry, self.thresholds, commanded[first - 1 : first], rotations[first - 1 : first]
            )
            if settle.margin[0] >= 0.0:
                break
            first -= 1
            blocker = (int(settle.nearest[0]), int(settle.part[0]), float(settle.clearance[0]))
            clearance = clearance.copy()
            clearance[first] = min(clearance[first], blocker[2])
        arm_why, arm_spheres = "", None
        if self.arm is not None and first > 0:
            arm_first, arm_blocker, arm_why, arm_spheres = self._arm_first(
                snapshot, commanded, rotations, first, chunk.dt
            )
            if arm_first < first:
                first, blocker = arm_first, arm_blocker
            else:
                arm_why, arm_spheres = "", None
        first = -1 if first == n else first
        common = {
            "min_distance_m": float(np.nanmin(clearance)),
            "holding": snapshot.holding,
            "obstacle_points": len(obstacles),
            "predicted_path": predicted,
        }
        if first < 0:
            return ShieldDecision(
                chunk.chunk_id,
                chunk.subtask_id,
                Decision.RELEASED_ALL,
                n,
                n,
                self.thresholds.hand_m,
                f"all {n} steps predicted clear (closest {_distance_text(clearance)})",
                frame_id=self.world_frame,
                released=chunk,
                **common,  # type: ignore[arg-type]
            )
        assert blocker is not None
        if arm_why:  # a link of the arm (or the arm's IK, or the hand between two steps)
            assert self.arm is not None
            index = blocker[0]
            threshold = self.arm.threshold_m
            name = obstacles.arm_name_of(index)
            point = tuple(float(v) for v in obstacles.arm_point(index)) if index >= 0 else (0.0, 0.0, 0.0)
            why = f"step {first} blocked: {arm_why}"
        else:
            index, blocking_part = blocker[0], Part(blocker[1])
            threshold = float(self.thresholds.of_part()[blocking_part])
            name = obstacles.name_of(index)
            point = tuple(float(v) for v in obstacles.points[index]) if index >= 0 else (0.0, 0.0, 0.0)
            why = (
                f"step {first} blocked: {PART_NAMES[blocking_part]} predicted {blocker[2]:.3f} m from "
                f"{name or 'an obstacle'} (threshold {threshold:.3f} m)"
            )
        nearest = np.asarray([point]) if index >= 0 else np.zeros((0, 3))
        blocked_fields = {
            **common,
            "arm_spheres": arm_spheres,
            "first_blocked_step": first,
            "blocking_obstacle": name,
            "blocking_point": point,
            "nearest_points": nearest,
            "frame_id": self.world_frame,
        }
        if not self.enabled:
            return ShieldDecision(
                chunk.chunk_id,
                chunk.subtask_id,
                Decision.RELEASED_ALL,
                n,
                n,
                threshold,
                f"shield disabled: released whole; would have {'retreated' if first == 0 else f'released {first}/{n}'}"
                f" ({why})",
                released=chunk,
                would_block=True,
                **blocked_fields,  # type: ignore[arg-type]
            )
        if first > 0:
            prefix = dataclasses.replace(
                chunk,
                positions=chunk.positions[:first],
                rotations=chunk.rotations[:first],
                gripper=chunk.gripper[:first],
            )
            return ShieldDecision(
                chunk.chunk_id,
                chunk.subtask_id,
                Decision.RELEASED_PREFIX,
                first,
                n,
                threshold,
                f"released {first}/{n}; {why}",
                released=prefix,
                **blocked_fields,  # type: ignore[arg-type]
            )
        retreat, path, reason = self.make_retreat(chunk, snapshot)
        return ShieldDecision(
            chunk.chunk_id,
            chunk.subtask_id,
            Decision.RETREAT,
            len(retreat) if retreat else 0,
            n,
            threshold,
            f"{reason}; {why}",
            released=retreat,
            retreat_path=path,
            **blocked_fields,  # type: ignore[arg-type]
        )

    def _arm_first(
        self, snapshot: Snapshot, commanded: FloatArray, rotations: FloatArray, limit: int, dt: float
    ) -> tuple[int, tuple[int, int, float], str, FloatArray | None]:
        """The first step (< `limit`, else `limit`) the whole-arm check blocks, its blocker
        (arm point index, -1, clearance), why (a link too close, an unreachable step, or the
        hand too close somewhere between two steps: `core/arm.py`) and, when a link blocked,
        the arm's spheres at that configuration (markers)."""
        assert self.arm is not None
        state, obstacles = snapshot.state, snapshot.obstacles
        if state.joints is None:  # fail closed: without the joints nothing knows where the links are
            return 0, (-1, -1, float("nan")), "no measured joint states: the arm's links cannot be checked", None
        width = state.gripper_width_m
        sweep = self.arm.sweep(state.joints, commanded[:limit], rotations[:limit], width, dt)
        verdict: ArmVerdict = self.arm.check(obstacles.arm_grid(snapshot.holding), sweep, width)
        first, blocker, why, spheres = limit, (-1, -1, float("nan")), "", None
        if verdict.first_blocked >= 0:
            first = verdict.first_blocked
            if verdict.q_blocked is not None:
                spheres = self.arm.spheres_at(verdict.q_blocked, width)
            blocker = (verdict.point, -1, verdict.clearance_m)
            near = obstacles.arm_name_of(verdict.point) or "an obstacle"
            why = verdict.reason or (
                f"{verdict.link} predicted {verdict.clearance_m:.3f} m from {near} "
                f"(threshold {self.arm.threshold_m:.3f} m with the sweep)"
            )
        # The hand between the steps: its boxes at the tool poses of the swept configurations.
        hand = check_poses(
            obstacles,
            snapshot.geometry,
            self.thresholds,
            sweep.tool_positions,
            sweep.tool_rotations,
            stop_at_first=True,
        )
        violated = np.flatnonzero(hand.violated[: hand.checked])
        if len(violated) and int(sweep.step[violated[0]]) < first:
            at = int(violated[0])
            first, spheres = int(sweep.step[at]), None
            part = Part(int(hand.part[at]))
            point = int(hand.nearest[at])
            blocker = (point, -1, float(hand.clearance[at]))
            near = obstacles.name_of(point) or "an obstacle"
            why = (
                f"{PART_NAMES[part]} predicted {hand.clearance[at]:.3f} m from {near} on the way to the step "
                f"(threshold {float(self.thresholds.of_part()[part]):.3f} m)"
            )
        return first, blocker, why, spheres

    def arm_clearance(self, snapshot: Snapshot, positions: FloatArray, rotations: FloatArray) -> float:
        """The arm's smallest link clearance (m) from the measured joints through the tool
        targets (inf without an arm check; -inf when a target is unreachable or the joints are unknown)."""
        if self.arm is None:
            return float("inf")
        state = snapshot.state
        if state.joints is None:
            return float("-inf")
        sweep = self.arm.sweep(state.joints, positions, rotations, state.gripper_width_m)
        if sweep.unreachable >= 0:
            return float("-inf")
        verdict = self.arm.check(snapshot.obstacles.arm_grid(snapshot.holding), sweep, state.gripper_width_m)
        return verdict.clearance_m if verdict.first_blocked >= 0 else verdict.min_clearance_m

    def retreat_direction(self, snapshot: Snapshot) -> tuple[FloatArray, FloatArray | None]:
        """Unit direction (3,) of the retreat and the obstacle point (3,) it leads away from
        (None when none is within NEAR_RANGE_M): away from the point that comes closest to
        its part's threshold (from the nearest point of the gripper's geometry to it), plus
        `up_weight` times up."""
        state, obstacles, geometry = snapshot.state, snapshot.obstacles, snapshot.geometry
        away = np.zeros(3)
        point = None
        now = check_poses(obstacles, geometry, self.thresholds, state.position[None], state.rotation[None])
        if now.nearest[0] >= 0:
            point = obstacles.points[now.nearest[0]]
            closest = state.position + state.rotation @ geometry.closest_point(
                state.rotation.T @ (point - state.position)
            )
            offset = closest - point
            norm = float(np.linalg.norm(offset))
            away = offset / norm if norm > 1e-9 else np.zeros(3)
        direction = away + self.retreat.up_weight * UP
        norm = float(np.linalg.norm(direction))
        return (direction / norm if norm > 1e-9 else UP.copy()), point

    def make_retreat(self, chunk: Chunk, snapshot: Snapshot) -> tuple[Chunk | None, FloatArray, str]:
        """The retreat chunk (absolute targets from the measured pose, current orientation
        and gripper command), its path (r, 3), and a reason. When that path would bring
        the gripper closer to an obstacle than it is now and under its threshold, a
        straight-up retreat is tried; when that is blocked too, nothing (hold)."""
        state = snapshot.state
        p = self.retreat
        fractions = (np.arange(p.steps) + 1.0) / p.steps
        direction, _ = self.retreat_direction(snapshot)
        now = check_poses(
            snapshot.obstacles, snapshot.geometry, self.thresholds, state.position[None], state.rotation[None]
        )
        rotations = np.repeat(state.rotation[None], p.steps, axis=0)
        arm_now = self.arm_clearance(snapshot, state.position[None], state.rotation[None])
        for candidate, label in ((direction, "retreat away and up"), (UP, "retreat straight up")):
            path = state.position + np.outer(fractions * p.distance_m, candidate)
            check = check_poses(snapshot.obstacles, snapshot.geometry, self.thresholds, path, rotations)
            hand_ok = bool(np.all((check.margin >= 0.0) | (check.margin >= now.margin[0] - 1e-4)))
            if hand_ok and self.arm is not None:  # the links may not come closer either
                arm_path = self.arm_clearance(snapshot, path, rotations)
                hand_ok = arm_path >= self.arm.threshold_m or arm_path >= arm_now - 1e-4
            if hand_ok:
                rotvec = _matrix_to_rotvec(state.rotation)
                retreat = Chunk(
                    chunk_id=chunk.chunk_id,
                    subtask_id=chunk.subtask_id,
                    source=ChunkSource.RETREAT,
                    convention=Convention.ABSOLUTE,
                    frame_id=self.world_frame,
                    # at fast control rates (1 cm in 5 ms is 2 m/s), 1 % under the speed limit
                    dt=max(chunk.dt, 1.01 * p.distance_m / p.steps / LIMITS.max_speed_m_s),
                    observation_id=chunk.observation_id,
                    observation_stamp_s=chunk.observation_stamp_s,
                    positions=path,
                    rotations=np.repeat(rotvec[None], p.steps, axis=0),
                    gripper=np.full(p.steps, float(np.clip(state.gripper_command, 0.0, 1.0))),
                )
                return retreat, path, f"first step blocked: {label} {p.distance_m:.3f} m over {p.steps} steps"
        return None, np.zeros((0, 3)), "first step blocked and every retreat would come closer: holding"


def _distance_text(clearance: FloatArray) -> str:
    closest = float(np.nanmin(clearance))
    return f">= {closest:.3f} m" if closest >= NEAR_RANGE_M else f"{closest:.3f} m"


def _matrix_to_rotvec(rotation: FloatArray) -> FloatArray:
    rotvec: FloatArray = Rotation.from_matrix(rotation).as_rotvec()
    return rotvec
