"""The geometric filter: release the prefix of a chunk that stays clear, or a retreat.

For every step the response model predicts the tool pose; the hand, finger and (while
holding) carried-object spheres placed there are checked against the obstacle points,
each part with its own distance threshold. The arm also settles at each commanded
target when a prefix ends, so commanded targets are checked too. Steps before the first
violation are released. When the very first step is blocked, a short retreat is released
instead: `retreat_steps` control steps along a direction combining "away from the
nearest obstacle point" with an upward component; the next chunk is then checked again
on fresh observations (paper §3.3.1, appendix C, Fig. 7).

Speed: one bounding sphere per step is tested first (one KD-tree query per step); only
steps whose bounding sphere comes near an obstacle get the per-sphere check.
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
from carryon_shield.core.gate import Decision, ShieldDecision
from carryon_shield.core.geometry import PART_NAMES, GripperGeometry, Part, box_distance
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


@dataclass(frozen=True)
class PoseCheck:
    """Clearances of a sequence of n tool poses. clearance (n,): smallest distance of any
    part's surface to an obstacle (a lower bound beyond the near range), metres; margin (n,):
    clearance minus that part's threshold (< 0: violated); part (n,): the part with the
    smallest margin; nearest (n,): index of that part's nearest obstacle point (-1: none)."""

    clearance: FloatArray
    margin: FloatArray
    part: npt.NDArray[np.int8]
    nearest: npt.NDArray[np.intp]

    @property
    def violated(self) -> npt.NDArray[np.bool_]:
        out: npt.NDArray[np.bool_] = self.margin < 0.0
        return out


def nearest_obstacles(
    obstacles: ObstacleSet, points: FloatArray, bound_m: float = np.inf
) -> tuple[FloatArray, npt.NDArray[np.intp]]:
    """Distance (N,) to the nearest obstacle point and its index (N,) for points (N, 3);
    inf and len(obstacles) beyond `bound_m`."""
    distance, index = obstacles.tree.query(points, distance_upper_bound=bound_m)
    return np.asarray(distance, dtype=np.float64), np.asarray(index, dtype=np.intp)


def check_poses(
    obstacles: ObstacleSet,
    geometry: GripperGeometry,
    thresholds: Thresholds,
    positions: FloatArray,
    rotations: FloatArray,
) -> PoseCheck:
    """Check the gripper at n poses (positions (n, 3), rotations (n, 3, 3)) against the obstacles.

    Four levels: the bounding sphere of the whole gripper per pose; one bounding sphere
    per part box for poses that are near; the spheres covering the boxes that are near;
    exact point-to-box distances for
    the boxes whose covering spheres look violated (spheres overstate a box by up to
    ~1 cm; the exact distance decides). Poses are refined in order up to the first
    confirmed violation; later poses keep the conservative sphere values."""
    n = len(positions)
    per_part = thresholds.of_part()
    clearance = np.full(n, np.inf)
    margin = np.full(n, np.inf)
    part = np.zeros(n, dtype=np.int8)
    nearest = np.full(n, -1, dtype=np.intp)
    if len(obstacles) == 0 or n == 0:
        return PoseCheck(clearance, margin, part, nearest)
    tree = obstacles.tree
    largest = float(per_part.max())
    centre, radius = geometry.bounding_sphere()
    coarse, coarse_index = nearest_obstacles(obstacles, positions + rotations @ centre, radius + largest)
    near = np.flatnonzero(np.isfinite(coarse))
    if len(near) == 0:
        return PoseCheck(clearance, margin, part, nearest)
    local, radii = geometry.spheres[:, :3], geometry.spheres[:, 3]
    sphere_threshold = per_part[geometry.part]
    world = np.einsum("nij,sj->nsi", rotations[near], local) + positions[near][:, None, :]
    # Second level: one bounding sphere per box (and one for the carried object).
    group_centre, group_radius, group_of_sphere = geometry.groups()
    group_world = np.einsum("nij,gj->ngi", rotations[near], group_centre) + positions[near][:, None, :]
    group_distance, _ = nearest_obstacles(obstacles, group_world.reshape(-1, 3), float(group_radius.max()) + largest)
    group_near = group_distance.reshape(len(near), len(group_radius)) < group_radius + largest
    active = np.nonzero(group_near[:, group_of_sphere])
    distance = np.full(world.shape[:2], np.inf)
    index = np.full(world.shape[:2], len(obstacles), dtype=np.intp)
    if len(active[0]):
        distance[active], index[active] = nearest_obstacles(obstacles, world[active], float(radii.max()) + largest)
    sphere_clearance = distance - radii
    for row in range(len(near)):
        candidates = np.flatnonzero((sphere_clearance[row] < sphere_threshold) & (geometry.box >= 0))
        if len(candidates) == 0:
            continue
        balls = tree.query_ball_point(world[row, candidates], radii[candidates] + sphere_threshold[candidates])
        found = np.unique(np.concatenate([np.asarray(b, dtype=np.intp) for b in balls]))
        pose = near[row]
        in_tool = (obstacles.points[found] - positions[pose]) @ rotations[pose]
        for box in np.unique(geometry.box[candidates]):
            members = candidates[geometry.box[candidates] == box]
            if len(found) == 0:
                sphere_clearance[row, members] = sphere_threshold[members]  # nothing within reach: clear
                continue
            exact = box_distance(in_tool, geometry.boxes[box, 0], geometry.boxes[box, 1])
            k = int(np.argmin(exact))
            sphere_clearance[row, members] = exact[k]
            index[row, members] = found[k]
        if np.any(sphere_clearance[row] < sphere_threshold):
            break  # first confirmed violation: later poses stay conservative
    sphere_margin = sphere_clearance - sphere_threshold
    worst = np.argmin(sphere_margin, axis=1)
    rows = np.arange(len(near))
    margin[near] = sphere_margin[rows, worst]
    clearance[near] = np.min(sphere_clearance, axis=1)
    part[near] = geometry.part[worst]
    found_point = np.isfinite(sphere_margin[rows, worst]) & (index[rows, worst] < len(obstacles))
    nearest[near] = np.where(found_point, index[rows, worst], -1)
    # Beyond every sphere's reach the bounding sphere still bounds the clearance.
    unbounded = near[~np.isfinite(clearance[near])]
    clearance[unbounded] = coarse[unbounded] - radius
    nearest[unbounded] = np.where(coarse_index[unbounded] < len(obstacles), coarse_index[unbounded], -1)
    return PoseCheck(clearance, margin, part, nearest)


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
    ) -> None:
        self.perceive = perceive
        self.response = response
        self.thresholds = thresholds
        self.retreat = retreat
        self.world_frame = world_frame
        self.enabled = enabled

    def _decision(self, chunk: Chunk, decision: Decision, reason: str, **fields: object) -> ShieldDecision:
        return ShieldDecision(
            chunk.chunk_id, chunk.subtask_id, decision, 0, len(chunk), self.thresholds.hand_m, reason,
            frame_id=self.world_frame, **fields,  # type: ignore[arg-type]
        )  # fmt: skip

    def __call__(self, chunk: Chunk, now_s: float) -> ShieldDecision:
        started = time.perf_counter()
        if chunk.frame_id != self.world_frame:
            return self._decision(
                chunk, Decision.REJECTED_INVALID,
                f"unknown frame {chunk.frame_id!r}: the shield checks chunks in {self.world_frame!r} only",
            )  # fmt: skip
        try:
            snapshot = self.perceive(now_s)
        except PerceptionUnavailable as exc:
            if not self.enabled:
                return ShieldDecision(
                    chunk.chunk_id, chunk.subtask_id, Decision.RELEASED_ALL, len(chunk), len(chunk),
                    self.thresholds.hand_m, f"shield disabled: released unchecked ({exc})", frame_id=self.world_frame,
                    released=chunk, would_block=True,
                )  # fmt: skip
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
        n = len(chunk)
        predicted, commanded, rotations = self.predict(chunk, state)
        check = check_poses(obstacles, geometry, self.thresholds, predicted, rotations)
        clearance = check.clearance
        blocked = np.flatnonzero(check.margin < 0.0)
        first = int(blocked[0]) if len(blocked) else n
        blocker = (int(check.nearest[first]), int(check.part[first]), float(clearance[first])) if first < n else None
        # A released prefix ends with the arm settling at its last commanded target: that
        # pose must be clear too, else the prefix shrinks.
        while first > 0:
            settle = check_poses(obstacles, geometry, self.thresholds, commanded[first - 1 : first],
                                 rotations[first - 1 : first])  # fmt: skip
            if settle.margin[0] >= 0.0:
                break
            first -= 1
            blocker = (int(settle.nearest[0]), int(settle.part[0]), float(settle.clearance[0]))
            clearance = clearance.copy()
            clearance[first] = min(clearance[first], blocker[2])
        first = -1 if first == n else first
        common = {
            "min_distance_m": float(clearance.min()),
            "holding": snapshot.holding,
            "obstacle_points": len(obstacles),
            "predicted_path": predicted,
        }
        if first < 0:
            return ShieldDecision(
                chunk.chunk_id, chunk.subtask_id, Decision.RELEASED_ALL, n, n, self.thresholds.hand_m,
                f"all {n} steps predicted clear (closest {clearance.min():.3f} m)", frame_id=self.world_frame,
                released=chunk, **common,  # type: ignore[arg-type]
            )  # fmt: skip
        assert blocker is not None
        index, blocking_part = blocker[0], Part(blocker[1])
        threshold = float(self.thresholds.of_part()[blocking_part])
        name = obstacles.name_of(index)
        point = tuple(float(v) for v in obstacles.points[index]) if index >= 0 else (0.0, 0.0, 0.0)
        nearest = np.asarray([point]) if index >= 0 else np.zeros((0, 3))
        why = (
            f"step {first} blocked: {PART_NAMES[blocking_part]} predicted {blocker[2]:.3f} m from "
            f"{name or 'an obstacle'} (threshold {threshold:.3f} m)"
        )
        blocked_fields = {
            **common, "first_blocked_step": first, "blocking_obstacle": name, "blocking_point": point,
            "nearest_points": nearest, "frame_id": self.world_frame,
        }  # fmt: skip
        if not self.enabled:
            return ShieldDecision(
                chunk.chunk_id, chunk.subtask_id, Decision.RELEASED_ALL, n, n, threshold,
                f"shield disabled: released whole; would have {'retreated' if first == 0 else f'released {first}/{n}'}"
                f" ({why})", released=chunk, would_block=True, **blocked_fields,  # type: ignore[arg-type]
            )  # fmt: skip
        if first > 0:
            prefix = dataclasses.replace(
                chunk, positions=chunk.positions[:first], rotations=chunk.rotations[:first],
                gripper=chunk.gripper[:first],
            )  # fmt: skip
            return ShieldDecision(
                chunk.chunk_id, chunk.subtask_id, Decision.RELEASED_PREFIX, first, n, threshold,
                f"released {first}/{n}; {why}", released=prefix, **blocked_fields,  # type: ignore[arg-type]
            )  # fmt: skip
        retreat, path, reason = self.make_retreat(chunk, snapshot)
        return ShieldDecision(
            chunk.chunk_id, chunk.subtask_id, Decision.RETREAT, len(retreat) if retreat else 0, n, threshold,
            f"{reason}; {why}", released=retreat, retreat_path=path, **blocked_fields,  # type: ignore[arg-type]
        )  # fmt: skip

    def retreat_direction(self, snapshot: Snapshot) -> tuple[FloatArray, FloatArray | None]:
        """Unit direction (3,) of the retreat and the nearest obstacle point (3,) it leads
        away from (None when no obstacle is near): away from the obstacle point nearest to
        the gripper's current geometry, plus `up_weight` times up."""
        state, obstacles, geometry = snapshot.state, snapshot.obstacles, snapshot.geometry
        away = np.zeros(3)
        point = None
        if len(obstacles):
            centres = state.position + geometry.spheres[:, :3] @ state.rotation.T
            distance, index = nearest_obstacles(obstacles, centres)
            worst = int(np.argmin(distance - geometry.spheres[:, 3]))
            if np.isfinite(distance[worst]):
                point = obstacles.points[index[worst]]
                offset = centres[worst] - point
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
        for candidate, label in ((direction, "retreat away and up"), (UP, "retreat straight up")):
            path = state.position + np.outer(fractions * p.distance_m, candidate)
            check = check_poses(snapshot.obstacles, snapshot.geometry, self.thresholds, path, rotations)
            if np.all((check.margin >= 0.0) | (check.margin >= now.margin[0] - 1e-4)):
                rotvec = _matrix_to_rotvec(state.rotation)
                retreat = Chunk(
                    chunk_id=chunk.chunk_id, subtask_id=chunk.subtask_id, source=ChunkSource.RETREAT,
                    convention=Convention.ABSOLUTE, frame_id=self.world_frame, dt=chunk.dt,
                    observation_id=chunk.observation_id, observation_stamp_s=chunk.observation_stamp_s,
                    positions=path, rotations=np.repeat(rotvec[None], p.steps, axis=0),
                    gripper=np.full(p.steps, float(np.clip(state.gripper_command, 0.0, 1.0))),
                )  # fmt: skip
                return retreat, path, f"first step blocked: {label} {p.distance_m:.3f} m over {p.steps} steps"
        return None, np.zeros((0, 3)), "first step blocked and every retreat would come closer: holding"


def _matrix_to_rotvec(rotation: FloatArray) -> FloatArray:
    rotvec: FloatArray = Rotation.from_matrix(rotation).as_rotvec()
    return rotvec
