"""The whole arm: every link of every configuration a chunk passes through, against the obstacles.

The hand check (`filter.check_poses`) sees the hand, the fingers and a carried object at the
tool poses of a chunk. This module adds the rest of the arm and the motion between steps:

1. **Configurations.** Each step's tool target becomes the joint configuration the driver
   will command: the drivers' damped least-squares IK, compiled (`ArmModel.inverse_path`),
   seeded from the measured joints and then from the previous step's solution. A step the IK
   cannot reach within `max_ik_error_m` / `max_ik_rotation_rad`, or whose joints move beyond
   the drivers' shared per-step limit, fails closed: it and every step after it are blocked
   (the drivers refuse it too).
2. **The sweep.** Between two configurations (the measured one before the first step), the
   joints move in a straight line; configurations are inserted on it until no sphere of the
   arm moves more than `sweep_m` from one checked configuration to the next. Every sphere
   is then checked grown by half that step, so a point the arm passes between two checked
   configurations is still within a grown sphere (to the chord's accuracy). The hand's boxes
   are checked at the tool poses of these configurations too: a one-step wrist turn sweeps
   the palm through what its two end poses miss.
3. **Self-collision.** The link pairs `ArmModel.self_collision_pairs` keeps (those the
   joints can bring together) may not overlap in any configuration of the sweep.
4. **Links.** Every sphere of the links `ArmModel` marks as checked (each link of the arm
   that a commanded joint moves, not the hand, whose exact boxes the hand check measures and
   where permitted contacts apply) against every obstacle point and the task's own target
   points: a link of the arm may touch nothing (the table it is mounted on moves with none
   of them).

A step is blocked when any configuration of the sweep that ends at it is. Distances come
from a compiled kernel over the same point grid as the hand check (`core/kernel.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt

from carryon_common.core.driver import LIMITS
from carryon_robot.core.arm_model import ArmModel
from carryon_robot.core.chain_ik import place_points
from carryon_robot.core.kinematics import ArmKinematics
from carryon_shield.core.kernel import PointGrid

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

SWEEP_M = 0.01  # largest motion of any arm sphere between two checked configurations
MAX_SUBSTEPS = 64  # per step; a step needing more fails closed (the joints jump)
SELF_MARGIN_M = 0.02  # a point this close to (or inside) a link's hull at the measured joints is the robot


@dataclass(frozen=True)
class ArmThresholds:
    """How close the arm's links may come to an obstacle point, and what the IK may miss by."""

    link_m: float = 0.02
    max_ik_error_m: float = 0.01
    max_ik_rotation_rad: float = 0.05


@dataclass(frozen=True)
class Sweep:
    """The configurations a chunk passes through: q (m, dof), step (m,) the chunk step each
    ends in (the configurations after the previous step's, up to and including its own),
    tool positions (m, 3) and rotations (m, 3, 3); `unreachable` the first step whose IK
    failed (-1: none) with its reason."""

    q: FloatArray
    step: IntArray
    tool_positions: FloatArray
    tool_rotations: FloatArray
    unreachable: int
    reason: str
    measured: FloatArray  # the configuration the sweep starts from


@dataclass(frozen=True)
class ArmVerdict:
    """The arm's first blocked step (-1: none) and why: the link, its clearance (m), the
    obstacle point index (-1: none, e.g. an IK failure)."""

    first_blocked: int
    link: str
    clearance_m: float
    point: int
    reason: str
    min_clearance_m: float
    q_blocked: FloatArray | None = None  # the first configuration too close (markers)


class ArmCheck:
    def __init__(
        self,
        model: ArmModel,
        kinematics: ArmKinematics,
        thresholds: ArmThresholds | None = None,
        *,
        sweep_m: float = SWEEP_M,
        self_margin_m: float = SELF_MARGIN_M,
    ) -> None:
        self.self_margin_m = self_margin_m
        self.model = model
        self.kinematics = kinematics
        self.thresholds = thresholds or ArmThresholds()
        self.sweep_m = sweep_m
        # what a link's distance is held to: its threshold, plus half the sweep step for the
        # motion between two checked configurations
        self.threshold_m = self.thresholds.link_m + 0.5 * sweep_m
        self._spheres, _joints, self._owner = model.checked_spheres

    def warm_up(self) -> None:
        """Compile (or load from numba's on-disk cache) everything a decision runs, before
        the first chunk: a one-step sweep from the middle of the joint ranges, checked
        against one point."""
        q = 0.5 * (self.model.lower + self.model.upper)
        positions, rotations = self.model.tool_poses(q[None])
        sweep = self.sweep(q, positions, rotations, 0.04)
        self.check(PointGrid.build(np.array([[5.0, 5.0, 5.0]])), sweep, 0.04)

    def configurations(
        self,
        q_measured: FloatArray,
        positions: FloatArray,
        rotations: FloatArray,
        finger_width_m: float = 0.0,
        dt: float = 0.0,
    ) -> tuple[FloatArray, int, str]:
        """Joints (n, dof) for the n tool targets, each IK seeded from the previous solution
        (the first from the measured joints): the drivers' IK, compiled (`ArmModel.inverse_path`);
        the first unreachable step (-1: none) and why: the IK misses, or (with `dt` > 0, the
        chunk's seconds a step) a joint would move beyond the drivers' shared per-step limit
        between two of the chunk's steps (the first step is the drivers' to judge: they know
        their last command, the shield only the measured joints). Steps from an unreachable
        one on keep the last reachable configuration."""
        limits = self.thresholds
        out, position_errors, rotation_errors, _iterations = self.model.inverse_path(
            q_measured, positions, rotations, finger_width_m
        )
        missed = ~((position_errors <= limits.max_ik_error_m) & (rotation_errors <= limits.max_ik_rotation_rad))
        # the drivers refuse a joint step beyond the shared limits (MotionLimits): so does the shield
        previous = np.vstack([np.asarray(q_measured, dtype=np.float64)[None], out[:-1]])
        jumps = np.zeros(len(out), dtype=bool)
        if dt > 0.0:
            jumps[1:] = np.abs(out - previous).max(axis=1)[1:] > LIMITS.joint_step_limit_rad(dt)
        if not (missed | jumps).any():
            return out, -1, ""
        index = int(np.argmax(missed | jumps))
        if missed[index]:
            why = (
                f"step {index}: the arm cannot reach the target (IK misses by "
                f"{position_errors[index] * 1000:.1f} mm, {math.degrees(rotation_errors[index]):.1f} deg)"
            )
        else:
            why = (
                f"step {index}: the joints would move {np.abs(out[index] - previous[index]).max():.2f} rad in one step "
                f"(limit {LIMITS.joint_step_limit_rad(dt):.2f} rad at {dt:g} s a step)"
            )
        out[index:] = previous[index]
        return out, index, why

    def sweep(
        self,
        q_measured: FloatArray,
        positions: FloatArray,
        rotations: FloatArray,
        finger_width_m: float,
        dt: float = 0.0,
    ) -> Sweep:
        steps, unreachable, reason = self.configurations(q_measured, positions, rotations, finger_width_m, dt)
        ends = np.vstack([np.asarray(q_measured, dtype=np.float64)[None], steps])
        # how far any point of the arm, hand included, moves in each step (sphere centres)
        centres = self.model.sphere_centres(ends, finger_width_m, moving=True)  # (n + 1, S, 3)
        moved = np.linalg.norm(np.diff(centres, axis=0), axis=2).max(axis=1, initial=0.0)
        counts = np.ceil(moved / self.sweep_m).astype(np.int64).clip(1, None)
        if np.any(counts > MAX_SUBSTEPS):
            jump = int(np.argmax(counts > MAX_SUBSTEPS))
            if unreachable < 0 or jump < unreachable:
                unreachable = jump
                reason = f"step {jump}: the arm would move {moved[jump]:.2f} m in one step"
            counts = counts.clip(None, MAX_SUBSTEPS)
        qs, step_of = [], []
        for index, count in enumerate(counts):
            fractions = (np.arange(count) + 1.0) / count
            qs.append(ends[index] + fractions[:, None] * (ends[index + 1] - ends[index]))
            step_of.append(np.full(count, index, dtype=np.int64))
        q = np.concatenate(qs)
        positions_swept, rotations_swept = self.model.tool_poses(q, finger_width_m)
        return Sweep(q, np.concatenate(step_of), positions_swept, rotations_swept, unreachable, reason, ends[0])

    def check(self, grid: PointGrid, sweep: Sweep, finger_width_m: float) -> ArmVerdict:
        """The first step of `sweep` whose configurations bring a checked link closer than
        `link_m` + half the sweep step to a point of `grid`. Spheres find the candidate points;
        the distance is to the link's convex hull (a lower bound of the distance to the link:
        never more than the truth, so never less safe), not to the spheres."""
        poses = self.model.joint_poses(sweep.q, finger_width_m)  # (m, J + 1, 4, 4)
        joints = self.model.checked_spheres[1]
        centres = place_points(poses, joints, np.ascontiguousarray(self._spheres[:, :3]))  # (m, S, 3)
        of_link = poses[:, [link.joint for link in self.model.links]]  # (m, L, 4, 4)
        link_from_world = np.zeros((len(sweep.q), of_link.shape[1], 3, 4))
        link_from_world[..., :3] = np.swapaxes(of_link[..., :3, :3], -1, -2)
        link_from_world[..., 3] = -np.einsum("mlji,mlj->mli", of_link[..., :3, :3], of_link[..., :3, 3])
        planes, starts = self.model.hulls
        threshold = self.threshold_m
        margin, sphere, point, checked = _spheres_kernel(
            grid.points,
            grid.start,
            grid.origin,
            float(grid.cell_m),
            grid.dims,
            np.ascontiguousarray(centres),
            np.ascontiguousarray(self._spheres[:, 3]),
            np.ascontiguousarray(self._owner),
            np.ascontiguousarray(link_from_world),
            np.ascontiguousarray(planes),
            starts,
            threshold,
            max(0.05, threshold),
            self.robot_points(grid, sweep.measured, finger_width_m),
        )
        margin = margin[:checked]
        first_config = int(np.argmax(margin < 0.0)) if np.any(margin < 0.0) else -1
        blocked = int(sweep.step[first_config]) if first_config >= 0 else -1
        clear = margin + threshold
        minimum = float(np.min(clear)) if len(clear) else math.inf
        if sweep.unreachable >= 0 and (blocked < 0 or sweep.unreachable <= blocked):
            return ArmVerdict(sweep.unreachable, "", math.nan, -1, sweep.reason, minimum)
        upto = first_config + 1 if first_config >= 0 else len(sweep.q)
        selfs = self.model.self_collisions(sweep.q[:upto], finger_width_m)
        if np.any(selfs >= 0):
            at = int(np.argmax(selfs >= 0))
            a, b = self.model.self_collision_pairs[int(selfs[at])]
            why = f"self-collision: {self.model.links[a].link} would touch {self.model.links[b].link}"
            return ArmVerdict(int(sweep.step[at]), self.model.links[a].link, 0.0, -1, why, minimum, sweep.q[at])
        if blocked < 0:
            return ArmVerdict(-1, "", minimum, -1, "", minimum)
        link = self.model.links[int(self._owner[sphere[first_config]])].link
        found = int(point[first_config])
        index = int(grid.index[found]) if found >= 0 else -1
        return ArmVerdict(blocked, link, float(clear[first_config]), index, "", minimum, sweep.q[first_config])

    def spheres_at(self, q: FloatArray, finger_width_m: float) -> FloatArray:
        """The checked links' spheres (S, 4) in `world` at joints `q` (markers)."""
        centres = self.model.sphere_centres(np.asarray(q)[None], finger_width_m)[0]
        return np.column_stack([centres, self._spheres[:, 3]])

    def robot_points(self, grid: PointGrid, q: FloatArray, finger_width_m: float) -> npt.NDArray[np.bool_]:
        """Which points of `grid` (grid order) are the robot itself at joints `q`: inside a
        link's convex hull grown by `self_margin_m` (depth noise, the motion since the frame).
        Perception labels the robot, but not always every pixel of it (a link's edge, the
        column between two links); those points sit inside the arm and would block it forever.
        An object the arm touches is only partly inside that margin: the rest of it still blocks."""
        spheres, joints, owner = self.model.all_spheres
        poses = self.model.joint_poses(np.asarray(q)[None], finger_width_m)[0]
        placed = poses[joints]  # (S, 4, 4)
        centres = np.einsum("sij,sj->si", placed[:, :3, :3], spheres[:, :3]) + placed[:, :3, 3]
        inverse = np.linalg.inv(poses[[link.joint for link in self.model.links]])
        planes, starts = self.model.hulls
        return _robot_points(
            grid.points,
            grid.start,
            grid.origin,
            float(grid.cell_m),
            grid.dims,
            np.ascontiguousarray(centres),
            np.ascontiguousarray(spheres[:, 3]),
            np.ascontiguousarray(owner),
            np.ascontiguousarray(inverse),
            np.ascontiguousarray(planes),
            starts,
            float(self.self_margin_m),
        )


@numba.njit(cache=True, nogil=True)
def _cells_near(  # noqa: PLR0917 - numba compiles positional arguments only
    centre: FloatArray, reach: float, origin: FloatArray, cell: float, dims: IntArray, first: IntArray, last: IntArray
) -> bool:
    """The grid cells within `reach` of `centre` along each axis, into `first` / `last`
    (inclusive); False when none is in the grid."""
    for a in range(3):
        first[a] = max(math.floor((centre[a] - reach - origin[a]) / cell), 0)
        last[a] = min(math.floor((centre[a] + reach - origin[a]) / cell), dims[a] - 1)
    return not (first[0] > last[0] or first[1] > last[1] or first[2] > last[2])


@numba.njit(cache=True, nogil=True)
def _robot_points(  # noqa: PLR0917 - numba compiles positional arguments only
    points: FloatArray,
    start: IntArray,
    origin: FloatArray,
    cell: float,
    dims: IntArray,
    centres: FloatArray,
    radii: FloatArray,
    owner: IntArray,
    link_from_world: FloatArray,
    planes: FloatArray,
    plane_start: IntArray,
    margin: float,
) -> npt.NDArray[np.bool_]:
    inside = np.zeros(points.shape[0], dtype=np.bool_)
    first = np.empty(3, dtype=np.int64)
    last = np.empty(3, dtype=np.int64)
    for s in range(centres.shape[0]):
        reach = radii[s] + margin
        if not _cells_near(centres[s], reach, origin, cell, dims, first, last):
            continue
        link = owner[s]
        t = link_from_world[link]
        for ix in range(first[0], last[0] + 1):
            for iy in range(first[1], last[1] + 1):
                row = (ix * dims[1] + iy) * dims[2]
                for k in range(start[row + first[2]], start[row + last[2] + 1]):
                    if inside[k]:
                        continue
                    dx, dy, dz = (
                        points[k, 0] - centres[s, 0],
                        points[k, 1] - centres[s, 1],
                        points[k, 2] - centres[s, 2],
                    )
                    if dx * dx + dy * dy + dz * dz > reach * reach:
                        continue
                    lx = t[0, 0] * points[k, 0] + t[0, 1] * points[k, 1] + t[0, 2] * points[k, 2] + t[0, 3]
                    ly = t[1, 0] * points[k, 0] + t[1, 1] * points[k, 1] + t[1, 2] * points[k, 2] + t[1, 3]
                    lz = t[2, 0] * points[k, 0] + t[2, 1] * points[k, 1] + t[2, 2] * points[k, 2] + t[2, 3]
                    within = True
                    for f in range(plane_start[link], plane_start[link + 1]):
                        if planes[f, 0] * lx + planes[f, 1] * ly + planes[f, 2] * lz + planes[f, 3] > margin:
                            within = False
                            break
                    inside[k] = within
    return inside


@numba.njit(cache=True, nogil=True)
def _spheres_kernel(  # noqa: PLR0917 - numba compiles positional arguments only
    points: FloatArray,
    start: IntArray,
    origin: FloatArray,
    cell: float,
    dims: IntArray,
    centres: FloatArray,
    radii: FloatArray,
    owner: IntArray,
    link_from_world: FloatArray,
    planes: FloatArray,
    plane_start: IntArray,
    threshold: float,
    near_range: float,
    ignore: npt.NDArray[np.bool_],
) -> tuple[FloatArray, IntArray, IntArray, int]:
    """For each configuration i (centres (m, S, 3)): the smallest (distance from a point to
    its sphere's link hull minus threshold) over the points within a sphere's radius plus
    near_range (capped at near_range - threshold), the sphere and the (grid-ordered) point
    behind it. Stops after the first configuration below zero; returns how many were checked."""
    m, s_count = centres.shape[0], centres.shape[1]
    margin = np.full(m, near_range - threshold)
    sphere = np.zeros(m, dtype=np.int64)
    nearest = np.full(m, -1, dtype=np.int64)
    first = np.empty(3, dtype=np.int64)
    last = np.empty(3, dtype=np.int64)
    for i in range(m):
        for s in range(s_count):
            reach = radii[s] + near_range
            if not _cells_near(centres[i, s], reach, origin, cell, dims, first, last):
                continue
            cx, cy, cz = centres[i, s, 0], centres[i, s, 1], centres[i, s, 2]
            link = owner[s]
            t = link_from_world[i, link]
            for ix in range(first[0], last[0] + 1):
                for iy in range(first[1], last[1] + 1):
                    row = (ix * dims[1] + iy) * dims[2]
                    for k in range(start[row + first[2]], start[row + last[2] + 1]):
                        if ignore[k]:
                            continue
                        px, py, pz = points[k, 0], points[k, 1], points[k, 2]
                        dx, dy, dz = px - cx, py - cy, pz - cz
                        if dx * dx + dy * dy + dz * dz > reach * reach:
                            continue
                        lx = t[0, 0] * px + t[0, 1] * py + t[0, 2] * pz + t[0, 3]
                        ly = t[1, 0] * px + t[1, 1] * py + t[1, 2] * pz + t[1, 3]
                        lz = t[2, 0] * px + t[2, 1] * py + t[2, 2] * pz + t[2, 3]
                        d = 0.0  # the farthest facet plane: a lower bound of the distance to the hull
                        for f in range(plane_start[link], plane_start[link + 1]):
                            d = max(d, planes[f, 0] * lx + planes[f, 1] * ly + planes[f, 2] * lz + planes[f, 3])
                        g = min(d, near_range) - threshold
                        if g < margin[i]:
                            margin[i], sphere[i], nearest[i] = g, s, k
        if margin[i] < 0.0:
            return margin, sphere, nearest, i + 1
    return margin, sphere, nearest, m
