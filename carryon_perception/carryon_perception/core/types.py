"""What perception takes in and gives out (pure data; no ROS, no simulator).

Input: one `carryon_common.core.clouds.CameraView` per camera (rgb, depth, intrinsics and
the optical frame's pose in `world`; its `segmentation` is ignored) and the robot's joint
positions by name. Output: a `PerceptionResult`: per camera an instance image whose ids
are stable across frames, with a label table id -> name (the same `camera/<name>/
segmentation` + `labels` the consumers read); the fused objects; the support planes.

Label conventions shared with every consumer: `robot` (the self-filter), `table` (the main
support plane), catalog names (`carrot`, `bowl`, ...), and `unknown_<n>` for a segment that
matches nothing in the catalog (still an obstacle). Instance ids: 0 = nothing (no depth, or
beyond range), `ROBOT_ID`, `TABLE_ID`, other planes from `PLANE_ID_BASE`, and object track
ids from `FIRST_TRACK_ID` on, never reused within a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

ROBOT_LABEL = "robot"
TABLE_LABEL = "table"
UNKNOWN_PREFIX = "unknown_"
ROBOT_ID = 1
TABLE_ID = 2
PLANE_ID_BASE = 3  # further support planes: 3 .. FIRST_TRACK_ID - 1
FIRST_TRACK_ID = 10


def is_unknown(label: str) -> bool:
    return label.startswith(UNKNOWN_PREFIX)


@dataclass(frozen=True)
class SupportPlane:
    """A horizontal-ish support surface found by RANSAC: points p with n . p + d = 0.

    `normal` is unit length and points up (+z side); `height_m` is the plane's z at its
    inliers' centroid; `min_xy` / `max_xy` bound its inliers in x, y (metres, `world`)."""

    label: str
    normal: FloatArray
    offset: float
    height_m: float
    min_xy: FloatArray
    max_xy: FloatArray
    inliers: int

    def signed_distance(self, points: FloatArray) -> npt.NDArray[np.float64]:
        """Height of each point (N, 3) above the plane (negative below), metres."""
        out: npt.NDArray[np.float64] = points @ self.normal + self.offset
        return out


@dataclass(frozen=True)
class PerceivedObject:
    """One object fused over the cameras that see it now.

    `label`: catalog name or `unknown_<n>`; `score`: how well it matched its catalog entry
    (0..1, 0 for unknown); `points` (N, 3) in `world`; `support`: the label of what it rests
    on (`table`, another object's label, or '' when it rests on nothing seen: held, falling);
    `region`: the named location (planner locations file) its centroid lies in, or ''."""

    track_id: int
    label: str
    score: float
    points: FloatArray
    cameras: tuple[str, ...]
    support: str = ""
    region: str = ""

    @property
    def centroid(self) -> FloatArray:
        out: FloatArray = self.points.mean(axis=0)
        return out

    @property
    def bbox(self) -> tuple[FloatArray, FloatArray]:
        return self.points.min(axis=0), self.points.max(axis=0)


@dataclass(frozen=True)
class CameraSegmentation:
    """One camera's instance image (H, W) int32 and its label table (id -> label)."""

    camera: str
    stamp_s: float
    instances: npt.NDArray[np.int32]
    labels: dict[int, str]


@dataclass(frozen=True)
class PerceptionResult:
    stamp_s: float
    segmentations: dict[str, CameraSegmentation]
    objects: list[PerceivedObject]
    planes: list[SupportPlane]
    diagnostics: list[str] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    # Named locations (the locations file) that no camera sees now: out of view, or behind the arm.
    out_of_view: tuple[str, ...] = ()

    def object(self, label: str) -> PerceivedObject | None:
        return next((o for o in self.objects if o.label == label), None)
