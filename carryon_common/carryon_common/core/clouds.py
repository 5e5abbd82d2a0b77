"""Object clouds from labelled instance masks + depth, fused over cameras: what the judge's
geometric backend, recovery's re-localisation and the harness perceive objects with.

Conventions (ROS): rgb (H, W, 3) uint8; depth (H, W) float32 metres along the optical axis,
0 = no return; segmentation (H, W) int32 instance ids with a label table id -> name (0 =
background); `intrinsics` the 3x3 pinhole matrix K in pixels; `world_from_camera` the 4x4 pose
of the *optical* frame (z forward, x right, y down) in `world` (z up, metres). Any
segmentation source with the same interface (simulator masks, a segmenter on a robot) works.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from carryon_common.core.depth import points_by_label
from carryon_common.core.errors import CarryOnError

FloatArray = npt.NDArray[np.float64]


class ObservationUnusable(CarryOnError):
    """Images are missing, stale or malformed (the message says which)."""


@dataclass(frozen=True)
class CameraView:
    """One camera's images at one instant (see the module docstring for conventions).

    `rgb` is what a VLM sees; `depth` + `segmentation` + `labels` + `intrinsics` (K) +
    `world_from_camera` are what geometry needs. Any of the arrays may be None when a camera
    does not provide it. `stamp_s`: seconds on the caller's clock.
    """

    camera: str
    stamp_s: float
    rgb: npt.NDArray[np.uint8] | None = None
    depth: npt.NDArray[np.float32] | None = None
    segmentation: npt.NDArray[np.int32] | None = None
    labels: Mapping[int, str] = field(default_factory=dict)
    intrinsics: npt.NDArray[np.float64] | None = None
    world_from_camera: npt.NDArray[np.float64] | None = None

    @property
    def has_geometry(self) -> bool:
        return all(x is not None for x in (self.depth, self.segmentation, self.intrinsics, self.world_from_camera))


def object_clouds(views: Sequence[CameraView], *, stride: int = 1, max_depth_m: float = 3.0) -> dict[str, FloatArray]:
    """World points (N, 3) per object name, fused over every view with geometry; every
    `stride`-th pixel, returns beyond `max_depth_m` ignored.

    Raises ObservationUnusable when no view provides depth + segmentation + intrinsics +
    pose, or when a view's depth and segmentation differ in shape."""
    with_geometry = [v for v in views if v.has_geometry]
    if not with_geometry:
        raise ObservationUnusable("no camera with depth, segmentation, intrinsics and pose")
    parts: dict[str, list[FloatArray]] = {}
    for view in with_geometry:
        assert view.depth is not None and view.segmentation is not None
        assert view.intrinsics is not None and view.world_from_camera is not None
        if view.depth.shape != view.segmentation.shape:
            raise ObservationUnusable(
                f"camera {view.camera}: depth {view.depth.shape} and segmentation {view.segmentation.shape} differ"
            )
        points, labels = points_by_label(
            view.depth,
            view.segmentation,
            view.intrinsics,
            view.world_from_camera,
            stride=stride,
            max_depth_m=max_depth_m,
        )
        for label in np.unique(labels):
            name = view.labels.get(int(label), "")
            if name == "" or int(label) == 0:
                continue
            parts.setdefault(name, []).append(points[labels == label])
    return {name: np.concatenate(chunks) for name, chunks in parts.items()}
