"""The filter's inner loop, compiled with numba: exact gripper-to-obstacle distances.

Once per obstacle set, `PointGrid.build` sorts the points into a uniform grid (a counting
sort: cell c holds `points[start[c]:start[c + 1]]`). For each of n tool poses the kernel
then visits only the cells under the parts' tool-frame bounding box grown by the near
range, moves those points into the tool frame and measures them against each part
exactly: boxes (hand, fingers) by point-to-box distance, the carried object by its
spheres. A chunk thus costs work proportional to the points near its path, not to the
size of the obstacle set. No Python runs per pose or per point; compiled functions are
cached on disk (numba `cache=True`) and compiled ahead of the first chunk by `warm_up()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
MIN_CELL_M = 0.025
MAX_CELLS = 1 << 18


@dataclass(frozen=True)
class PointGrid:
    """Obstacle points sorted by grid cell. points (N, 3) in cell order; index (N,) their
    indices in the original set; start (cells + 1,); origin (3,), cell size (m), dims (3,)."""

    points: FloatArray
    index: IntArray
    start: IntArray
    origin: FloatArray
    cell_m: float
    dims: IntArray

    @classmethod
    def build(cls, points: FloatArray) -> PointGrid:
        """Non-finite points are left out (they cannot be binned; grounding drops them already)."""
        points = np.ascontiguousarray(points, dtype=np.float64).reshape(-1, 3)
        valid = np.flatnonzero(np.isfinite(points).all(axis=1))
        finite = points[valid]
        if len(finite) == 0:
            return cls(
                finite,
                np.zeros(0, dtype=np.int64),
                np.zeros(2, dtype=np.int64),
                np.zeros(3),
                1.0,
                np.ones(3, dtype=np.int64),
            )
        origin = finite.min(axis=0)
        extent = finite.max(axis=0) - origin
        cell = MIN_CELL_M
        while np.prod(np.floor(extent / cell) + 1) > MAX_CELLS:
            cell *= 1.25
        dims = (np.floor(extent / cell) + 1).astype(np.int64)
        order, start = _sort_into_cells(finite, origin, cell, dims)
        return cls(np.ascontiguousarray(finite[order]), valid[order].astype(np.int64), start, origin, cell, dims)


@numba.njit(cache=True, nogil=True)
def _sort_into_cells(points: FloatArray, origin: FloatArray, cell: float, dims: IntArray) -> tuple[IntArray, IntArray]:
    n = points.shape[0]
    ids = np.empty(n, dtype=np.int64)
    count = np.zeros(dims[0] * dims[1] * dims[2] + 1, dtype=np.int64)
    for j in range(n):
        ix = min(int((points[j, 0] - origin[0]) / cell), dims[0] - 1)
        iy = min(int((points[j, 1] - origin[1]) / cell), dims[1] - 1)
        iz = min(int((points[j, 2] - origin[2]) / cell), dims[2] - 1)
        ids[j] = (ix * dims[1] + iy) * dims[2] + iz
        count[ids[j] + 1] += 1
    for c in range(1, count.shape[0]):
        count[c] += count[c - 1]
    fill = count[:-1].copy()
    order = np.empty(n, dtype=np.int64)
    for j in range(n):
        order[fill[ids[j]]] = j
        fill[ids[j]] += 1
    return order, count


@numba.njit(cache=True, nogil=True)
def _check_kernel(  # noqa: PLR0917 - numba compiles positional arguments only
    points: FloatArray,
    start: IntArray,
    origin: FloatArray,
    cell: float,
    dims: IntArray,
    positions: FloatArray,
    rotations: FloatArray,
    boxes: FloatArray,
    box_part: IntArray,
    spheres: FloatArray,
    sphere_part: IntArray,
    thresholds: FloatArray,
    near_range: float,
    stop_at_first: bool,
) -> tuple[FloatArray, FloatArray, IntArray, IntArray, int]:
    n = positions.shape[0]
    clearance = np.full(n, np.nan)
    margin = np.full(n, np.nan)
    part = np.zeros(n, dtype=np.int64)
    nearest = np.full(n, -1, dtype=np.int64)
    largest = thresholds.max()
    # The parts' box in the tool frame, grown by the near range: its centre and half size.
    tool_lo = np.full(3, np.inf)
    tool_hi = np.full(3, -np.inf)
    for a in range(3):
        for b in range(boxes.shape[0]):
            tool_lo[a] = min(tool_lo[a], boxes[b, 0, a] - near_range)
            tool_hi[a] = max(tool_hi[a], boxes[b, 1, a] + near_range)
        for s in range(spheres.shape[0]):
            tool_lo[a] = min(tool_lo[a], spheres[s, a] - spheres[s, 3] - near_range)
            tool_hi[a] = max(tool_hi[a], spheres[s, a] + spheres[s, 3] + near_range)
    mid = 0.5 * (tool_lo + tool_hi)
    half = 0.5 * (tool_hi - tool_lo)
    # The carried spheres' own box, grown the same: points outside it skip the sphere loop.
    carried_lo = np.full(3, np.inf)
    carried_hi = np.full(3, -np.inf)
    for a in range(3):
        for s in range(spheres.shape[0]):
            carried_lo[a] = min(carried_lo[a], spheres[s, a] - spheres[s, 3] - near_range)
            carried_hi[a] = max(carried_hi[a], spheres[s, a] + spheres[s, 3] + near_range)
    checked = n
    for i in range(n):
        best_distance = near_range  # points outside the grown box are at least this far
        best_margin = near_range - largest
        best_part = 0
        best_point = -1
        px, py, pz = positions[i, 0], positions[i, 1], positions[i, 2]
        # Cells under the grown box's world-axis-aligned bounds at this pose.
        first = np.empty(3, dtype=np.int64)
        last = np.empty(3, dtype=np.int64)
        for a in range(3):
            centre = positions[i, a]
            extent = 0.0
            for b in range(3):
                centre += rotations[i, a, b] * mid[b]
                extent += abs(rotations[i, a, b]) * half[b]
            first[a] = max(math.floor((centre - extent - origin[a]) / cell), 0)
            last[a] = min(math.floor((centre + extent - origin[a]) / cell), dims[a] - 1)
        outside = first[0] > last[0] or first[1] > last[1] or first[2] > last[2]
        for ix in range(first[0], last[0] + 1 if not outside else first[0]):
            for iy in range(first[1], last[1] + 1):
                row = (ix * dims[1] + iy) * dims[2]
                for k in range(start[row + first[2]], start[row + last[2] + 1]):
                    dx, dy, dz = points[k, 0] - px, points[k, 1] - py, points[k, 2] - pz
                    # Into the tool frame: local = R^T (point - position).
                    lx = rotations[i, 0, 0] * dx + rotations[i, 1, 0] * dy + rotations[i, 2, 0] * dz
                    ly = rotations[i, 0, 1] * dx + rotations[i, 1, 1] * dy + rotations[i, 2, 1] * dz
                    lz = rotations[i, 0, 2] * dx + rotations[i, 1, 2] * dy + rotations[i, 2, 2] * dz
                    inside = tool_lo[0] <= lx <= tool_hi[0] and tool_lo[1] <= ly <= tool_hi[1]
                    if not (inside and tool_lo[2] <= lz <= tool_hi[2]):
                        continue
                    for b in range(boxes.shape[0]):
                        qx = max(boxes[b, 0, 0] - lx, lx - boxes[b, 1, 0], 0.0)
                        qy = max(boxes[b, 0, 1] - ly, ly - boxes[b, 1, 1], 0.0)
                        qz = max(boxes[b, 0, 2] - lz, lz - boxes[b, 1, 2], 0.0)
                        d = math.sqrt(qx * qx + qy * qy + qz * qz)
                        best_distance = min(best_distance, d)
                        g = d - thresholds[box_part[b]]
                        if g < best_margin:
                            best_margin, best_part, best_point = g, box_part[b], k
                    near_carried = carried_lo[0] <= lx <= carried_hi[0] and carried_lo[1] <= ly <= carried_hi[1]
                    if not (near_carried and carried_lo[2] <= lz <= carried_hi[2]):
                        continue
                    for s in range(spheres.shape[0]):
                        sx, sy, sz = lx - spheres[s, 0], ly - spheres[s, 1], lz - spheres[s, 2]
                        d = max(math.sqrt(sx * sx + sy * sy + sz * sz) - spheres[s, 3], 0.0)
                        best_distance = min(best_distance, d)
                        g = d - thresholds[sphere_part[s]]
                        if g < best_margin:
                            best_margin, best_part, best_point = g, sphere_part[s], k
        clearance[i] = best_distance
        margin[i] = best_margin
        part[i] = best_part
        nearest[i] = best_point
        if stop_at_first and best_margin < 0.0:
            checked = i + 1
            break
    return clearance, margin, part, nearest, checked


def check_kernel(
    grid: PointGrid,
    positions: FloatArray,
    rotations: FloatArray,
    *,
    boxes: FloatArray,
    box_part: npt.NDArray[np.integer],
    spheres: FloatArray,
    sphere_part: npt.NDArray[np.integer],
    thresholds: FloatArray,
    near_range: float,
    stop_at_first: bool,
) -> tuple[FloatArray, FloatArray, IntArray, IntArray, int]:
    """(clearance, margin, part, nearest, checked) of the parts at n poses; `nearest` holds
    indices into the original point set. See `filter.check_poses` for the meaning."""
    f64 = np.float64
    clearance, margin, part, sorted_nearest, checked = _check_kernel(
        grid.points,
        grid.start,
        grid.origin,
        float(grid.cell_m),
        grid.dims,
        np.ascontiguousarray(positions, dtype=f64).reshape(-1, 3),
        np.ascontiguousarray(rotations, dtype=f64).reshape(-1, 3, 3),
        np.ascontiguousarray(boxes, dtype=f64).reshape(-1, 2, 3),
        np.ascontiguousarray(box_part, dtype=np.int64),
        np.ascontiguousarray(spheres, dtype=f64).reshape(-1, 4),
        np.ascontiguousarray(sphere_part, dtype=np.int64),
        np.ascontiguousarray(thresholds, dtype=f64),
        float(near_range),
        bool(stop_at_first),
    )
    nearest: IntArray = np.full(len(sorted_nearest), -1, dtype=np.int64)
    found = sorted_nearest >= 0
    nearest[found] = grid.index[sorted_nearest[found]]
    return clearance, margin, part, nearest, int(checked)


def warm_up() -> None:
    """Compile (or load from the on-disk cache) before the first real chunk."""
    check_kernel(
        PointGrid.build(np.zeros((1, 3))),
        np.ones((1, 3)),
        np.eye(3)[None],
        boxes=np.zeros((1, 2, 3)),
        box_part=np.zeros(1, dtype=np.int64),
        spheres=np.zeros((0, 4)),
        sphere_part=np.zeros(0, dtype=np.int64),
        thresholds=np.full(3, 0.01),
        near_range=0.05,
        stop_at_first=True,
    )
