"""Depth images to 3-D points: shared by the shield's grounding and the geometric judge.

Conventions: depth (H, W) float metres along the optical axis, 0 or non-finite = no
return; intrinsics (3, 3) pinhole matrix K in pixels; world_from_camera (4, 4) pose of the ROS
*optical* frame (z forward, x right, y down) in the world frame.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]


def pixel_grid(height: int, width: int, stride: int = 1) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Row and column indices (each (h, w)) of every `stride`-th pixel."""
    rows, cols = np.mgrid[0:height:stride, 0:width:stride]
    return rows, cols


def backproject(
    depth: npt.NDArray[np.floating],
    intrinsics: FloatArray,
    world_from_camera: FloatArray,
    *,
    stride: int = 1,
    mask: npt.NDArray[np.bool_] | None = None,
    max_depth_m: float = np.inf,
) -> tuple[FloatArray, npt.NDArray[np.intp]]:
    """World points (N, 3) of the valid depth pixels (every `stride`-th, within `mask`,
    nearer than `max_depth_m`), and their flat pixel indices (N,) into the full image
    (row * W + col), so labels or colours can be looked up for each point."""
    height, width = depth.shape
    rows, cols = pixel_grid(height, width, stride)
    z = np.asarray(depth, dtype=np.float64)[rows, cols]
    valid = np.isfinite(z) & (z > 0.0) & (z < max_depth_m)
    if mask is not None:
        valid &= mask[rows, cols]
    z, r, c = z[valid], rows[valid], cols[valid]
    fx, fy, cx, cy = intrinsics[0, 0], intrinsics[1, 1], intrinsics[0, 2], intrinsics[1, 2]
    camera_points = np.stack([(c - cx) * z / fx, (r - cy) * z / fy, z], axis=1)
    world: FloatArray = camera_points @ world_from_camera[:3, :3].T + world_from_camera[:3, 3]
    return world, r * width + c


def points_by_label(
    depth: npt.NDArray[np.floating],
    segmentation: IntArray,
    intrinsics: FloatArray,
    world_from_camera: FloatArray,
    *,
    stride: int = 1,
    max_depth_m: float = np.inf,
) -> tuple[FloatArray, IntArray]:
    """World points (N, 3) of the valid pixels and the segmentation id (N,) of each."""
    points, flat = backproject(depth, intrinsics, world_from_camera, stride=stride, max_depth_m=max_depth_m)
    labels: IntArray = np.asarray(segmentation).reshape(-1)[flat].astype(np.int32)
    return points, labels
