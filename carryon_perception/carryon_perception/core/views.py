"""One camera's images as perception needs them: checked (`check_view`: why a camera cannot
be perceived) and back-projected to an organised cloud of world points (`organised_points`)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from carryon_common.core.clouds import CameraView
from carryon_perception.core.types import FloatArray

BoolArray = npt.NDArray[np.bool_]


def organised_points(view: CameraView, max_depth_m: float) -> tuple[FloatArray, BoolArray]:
    """World points (H, W, 3) of every pixel and which are valid returns (H, W)."""
    assert view.depth is not None and view.intrinsics is not None and view.world_from_camera is not None
    z = np.asarray(view.depth, dtype=np.float64)
    height, width = z.shape
    valid = np.isfinite(z) & (z > 0.0) & (z < max_depth_m)
    z = np.where(valid, z, 0.0)
    k = view.intrinsics
    rows, cols = np.mgrid[0:height, 0:width]
    camera = np.stack([(cols - k[0, 2]) * z / k[0, 0], (rows - k[1, 2]) * z / k[1, 1], z], axis=-1)
    pose = view.world_from_camera
    world: FloatArray = camera @ pose[:3, :3].T + pose[:3, 3]
    return world, valid


def check_view(view: CameraView) -> str | None:
    """Why a camera's images cannot be perceived, or None when they can."""
    if view.depth is None:
        return f"camera {view.camera}: no depth image"
    if view.rgb is None:
        return f"camera {view.camera}: no colour image"
    if view.intrinsics is None:
        return f"camera {view.camera}: no camera_info (intrinsics)"
    if view.world_from_camera is None:
        return f"camera {view.camera}: no pose"
    if view.rgb.shape[:2] != view.depth.shape:
        return f"camera {view.camera}: colour {view.rgb.shape[:2]} and depth {view.depth.shape} sizes differ"
    depth = np.asarray(view.depth)
    if not np.any(np.isfinite(depth) & (depth > 0)):
        return f"camera {view.camera}: depth has no valid return (all zero or NaN)"
    return None


def region_seen(
    view: CameraView,
    usable: BoolArray,
    center: tuple[float, float],
    size: tuple[float, float],
    height_m: float,
    *,
    grid: int = 3,
) -> BoolArray:
    """Which of a `grid` x `grid` sample of a table region (world x-y centre and size, at
    z = `height_m`) this camera sees (G*G,) bool: the sample projects into the image onto a
    pixel with a usable return (`usable`: valid depth, not the robot). What stands on the
    region (a bowl) still counts as seeing it; the arm in front of it does not."""
    assert view.intrinsics is not None and view.world_from_camera is not None
    (cx, cy), (sx, sy) = center, size
    u = (np.arange(grid) + 0.5) / grid - 0.5
    xs, ys = np.meshgrid(cx + u * sx, cy + u * sy)
    samples = np.column_stack([xs.ravel(), ys.ravel(), np.full(xs.size, height_m)])
    pose = np.asarray(view.world_from_camera)
    camera = (samples - pose[:3, 3]) @ pose[:3, :3]  # world -> camera (optical frame)
    k = np.asarray(view.intrinsics)
    seen = np.zeros(len(samples), dtype=bool)
    ahead = camera[:, 2] > 1e-3
    cols = np.full(len(samples), -1)
    rows = np.full(len(samples), -1)
    cols[ahead] = np.floor(k[0, 0] * camera[ahead, 0] / camera[ahead, 2] + k[0, 2]).astype(int)
    rows[ahead] = np.floor(k[1, 1] * camera[ahead, 1] / camera[ahead, 2] + k[1, 2]).astype(int)
    height, width = usable.shape
    inside = ahead & (cols >= 0) & (cols < width) & (rows >= 0) & (rows < height)
    seen[inside] = usable[rows[inside], cols[inside]]
    return seen
