"""Support planes (the table, shelves) found by RANSAC on the cameras' points, with Open3D.

Points are in `world` (z up, metres). A plane counts as a support when its normal is
within `max_tilt_deg` of vertical and it holds at least `min_inliers` voxels: a plate's
top is horizontal too, but small. The largest is labelled `table`; further ones
`support_<n>`, highest inlier count first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import open3d as o3d

from carryon_perception.core.types import TABLE_LABEL, FloatArray, SupportPlane


@dataclass(frozen=True)
class PlaneParams:
    voxel_m: float = 0.01  # points are voxel-averaged first: RANSAC cost and density evened out
    distance_m: float = 0.008  # inlier band of a plane, metres (sensor noise + table texture)
    iterations: int = 200
    min_inliers: int = 1500  # voxels: ~0.15 m^2 at 1 cm, far more than any tabletop object's top
    max_tilt_deg: float = 12.0
    max_planes: int = 3
    seed: int = 0  # RANSAC's sampling seed: the same frame gives the same planes


class PlaneFinder:
    """Finds support planes; keeps the last table when a frame shows too little of it (the
    wrist camera close to an object), so consumers never see the table flicker away."""

    def __init__(self, params: PlaneParams | None = None) -> None:
        self.params = params or PlaneParams()
        self._last: list[SupportPlane] = []
        o3d.utility.random.seed(self.params.seed)

    def find(self, points: FloatArray) -> list[SupportPlane]:
        """Support planes among `points` (N, 3); the previous ones when none is found now."""
        found = find_planes(points, self.params)
        if found:
            self._last = found
        return list(self._last)


def find_planes(points: FloatArray, params: PlaneParams) -> list[SupportPlane]:
    """Horizontal-ish planes by repeated RANSAC, each found plane's inliers removed before
    the next search. Empty when no plane has `min_inliers`."""
    if len(points) < 3:
        return []
    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(np.asarray(points, dtype=np.float64)))
    cloud = cloud.voxel_down_sample(params.voxel_m)
    min_up = math.cos(math.radians(params.max_tilt_deg))
    planes: list[SupportPlane] = []
    # A tilted wall or the robot's flank can be the largest plane: skip it and search the rest,
    # a bounded number of times.
    for _ in range(params.max_planes + 3):
        if len(cloud.points) < params.min_inliers or len(planes) >= params.max_planes:
            break
        model, inliers = cloud.segment_plane(
            distance_threshold=params.distance_m, ransac_n=3, num_iterations=params.iterations
        )
        if len(inliers) < params.min_inliers:
            break
        a, b, c, d = (float(v) for v in model)
        norm = math.sqrt(a * a + b * b + c * c)
        normal = np.array([a, b, c]) / norm
        offset = d / norm
        if normal[2] < 0:
            normal, offset = -normal, -offset
        inlier_points = np.asarray(cloud.points)[inliers]
        cloud = cloud.select_by_index(inliers, invert=True)
        if normal[2] < min_up:
            continue
        label = TABLE_LABEL if not planes else f"support_{len(planes)}"
        planes.append(_plane(label, normal, offset, inlier_points))
    return planes


def _plane(label: str, normal: FloatArray, offset: float, inliers: FloatArray) -> SupportPlane:
    low, high = np.percentile(inliers[:, :2], [0.5, 99.5], axis=0)
    centroid = inliers.mean(axis=0)
    return SupportPlane(
        label=label,
        normal=normal,
        offset=offset,
        height_m=float(centroid[2]),
        min_xy=np.asarray(low, dtype=np.float64),
        max_xy=np.asarray(high, dtype=np.float64),
        inliers=len(inliers),
    )


def within_extent(plane: SupportPlane, points: FloatArray, margin_m: float) -> npt.NDArray[np.bool_]:
    """Which points (N, 3) lie over the plane's x-y extent, widened by `margin_m`."""
    xy = points[:, :2]
    inside: npt.NDArray[np.bool_] = np.all((xy >= plane.min_xy - margin_m) & (xy <= plane.max_xy + margin_m), axis=1)
    return inside
