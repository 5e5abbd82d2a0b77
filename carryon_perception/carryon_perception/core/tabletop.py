"""The `tabletop` perception backend: no learned weights.

Per frame, for every camera: depth to world points; the robot removed by the self-filter
(its model posed by the joint states); support planes by RANSAC on every camera's
remaining points; what stands on a support segmented by depth and colour (segment.py);
each segment described and labelled against the object catalog; segments of the same
label fused over cameras; track ids kept stable (tracker.py). Output: per camera an
instance image and label table (robot, table, objects, unknown_<n>), the fused objects
with their support and region, and the planes.

Two optional stages plug in here (the `open_vocab` backend and the `namer` option):
a `Recogniser` names regions of each colour image before the depth segmentation (its
regions become labelled segments, the rest is segmented and labelled as above), and a
`Namer` gives unidentified objects a name after fusion (their track ids stay).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from scipy.spatial import cKDTree

from carryon_common.core.clouds import CameraView, ObservationUnusable
from carryon_common.core.locations import Location, region_of
from carryon_perception.core.fuse import reconcile, share_on
from carryon_perception.core.planes import PlaneFinder, PlaneParams, within_extent
from carryon_perception.core.regions import NamedMask, Recogniser, named_segments
from carryon_perception.core.segment import Segment, SegmentParams, mark_partial, segment_image
from carryon_perception.core.tracker import Tracker
from carryon_perception.core.types import (
    PLANE_ID_BASE,
    ROBOT_ID,
    ROBOT_LABEL,
    TABLE_ID,
    CameraSegmentation,
    FloatArray,
    PerceivedObject,
    PerceptionResult,
    SupportPlane,
)
from carryon_perception.core.views import check_view, organised_points, region_seen

BoolArray = npt.NDArray[np.bool_]


class SelfFilter(Protocol):
    def mask(
        self, points: FloatArray, joints: Mapping[str, float], gripper_width_m: float | None = None
    ) -> BoolArray: ...


class Labeller(Protocol):
    """Names each segment of one camera (None = unidentified), with a score 0..1."""

    def label_segments(
        self, segments: Sequence[Segment], support_height_m: float
    ) -> list[tuple[str | None, float]]: ...


class Namer(Protocol):
    """Names unidentified objects after fusion: the objects with some relabelled (same track
    ids), and diagnostics. `images`: per camera its rgb (H, W, 3) uint8 and this frame's
    instance image (H, W) int32; `now_s`: the frame's stamp, seconds."""

    def rename(
        self,
        objects: Sequence[PerceivedObject],
        images: Sequence[tuple[npt.NDArray[np.uint8], npt.NDArray[np.int32]]],
        now_s: float,
    ) -> tuple[list[PerceivedObject], list[str]]: ...


@dataclass(frozen=True)
class TabletopParams:
    max_depth_m: float = 2.5
    # Only points inside this box (world, metres) are perceived: the floor and the room are not
    # supports or objects.
    workspace_min: tuple[float, float, float] = (-0.3, -0.9, 0.25)
    workspace_max: tuple[float, float, float] = (1.4, 0.9, 1.6)
    min_object_height_m: float = 0.006
    max_object_height_m: float = 0.6
    extent_margin_m: float = 0.05  # objects may overhang the support's edge by this much
    leak_px: int = 8  # segments this small beside the robot in the image...
    leak_m: float = 0.03  # ...and this close to its points are robot pixels the self-filter missed
    fuse_unknown_m: float = 0.05  # unidentified segments of two cameras this close are one object
    fuse_apart_m: float = 0.05  # segments of one label with no point this close to its best match are another object
    seen_as_m: float = 0.015  # an unidentified segment's points this close to another camera's named object...
    seen_as_share: float = 0.5  # ...at least this share of them: it is that object
    named_min_share: float = 0.3  # a Recogniser's region names pixels only when at least this share of it
    # stands on a support (else it is the robot, the table or the room, and names nothing)
    plane_stride: int = 2  # every n-th pixel feeds RANSAC (the planes need far fewer points)
    in_view_share: float = 0.5  # a named location is in view when a camera sees this share of its region
    planes: PlaneParams = field(default_factory=PlaneParams)
    segments: SegmentParams = field(default_factory=SegmentParams)


@dataclass
class _CameraWork:
    view: CameraView
    points: FloatArray  # (H, W, 3)
    valid: BoolArray  # (H, W)
    robot: BoolArray  # (H, W)
    instances: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int32))
    segments: list[Segment] = field(default_factory=list)
    names: list[tuple[str | None, float]] = field(default_factory=list)
    named: list[NamedMask] = field(default_factory=list)  # a Recogniser's regions, if one is set
    preset: list[tuple[str, float]] = field(default_factory=list)  # names of the first segments (from `named`)


_Member = tuple[_CameraWork, Segment, float]  # a segment of one camera and its label score
_Tree = Any  # scipy's cKDTree (its stub is generic over what was built)


class TabletopPerception:
    """The backend; one per run (it keeps tracks and the last planes). `name`: the backend
    name it reports (`open_vocab` when built with that backend's recogniser)."""

    def __init__(
        self,
        labeller: Labeller,
        self_filter: SelfFilter,
        locations: Mapping[str, Location] | None = None,
        params: TabletopParams | None = None,
        tracker: Tracker | None = None,
        *,
        recogniser: Recogniser | None = None,
        namer: Namer | None = None,
        name: str = "tabletop",
    ) -> None:
        self.name = name
        self.labeller = labeller
        self.self_filter = self_filter
        self.locations = dict(locations or {})
        self.params = params or TabletopParams()
        self.planes = PlaneFinder(self.params.planes)
        self.tracker = tracker or Tracker()
        self.recogniser = recogniser
        self.namer = namer

    def perceive(
        self,
        views: Sequence[CameraView],
        joints: Mapping[str, float],
        gripper_width_m: float | None,
        stamp_s: float,
        joints_by_camera: Mapping[str, Mapping[str, float]] | None = None,
    ) -> PerceptionResult:
        """Perceive one instant. Unusable cameras are left out with a diagnostic; raises
        ObservationUnusable when no camera is usable. `joints_by_camera`: the joint states
        at each camera's own stamp (cameras not named use `joints`)."""
        timings: dict[str, float] = {}
        started = clock = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal clock
            now = time.perf_counter()
            timings[stage] = timings.get(stage, 0.0) + (now - clock) * 1000.0
            clock = now

        diagnostics = [reason for view in views if (reason := check_view(view)) is not None]
        usable = [view for view in views if check_view(view) is None]
        if not usable:
            raise ObservationUnusable("; ".join(diagnostics) or "no camera images")
        work = []
        low, high = np.asarray(self.params.workspace_min), np.asarray(self.params.workspace_max)
        for view in usable:
            points, valid = organised_points(view, self.params.max_depth_m)
            valid &= np.all((points >= low) & (points <= high), axis=-1)
            work.append(_CameraWork(view, points, valid, np.zeros(valid.shape, dtype=bool)))
        lap("points")
        for cam in work:
            posed = (joints_by_camera or {}).get(cam.view.camera, joints)
            cam.robot[cam.valid] = self.self_filter.mask(cam.points[cam.valid], posed, gripper_width_m)
        lap("self_filter")
        stride = self.params.plane_stride
        free = [c.points[::stride, ::stride][(c.valid & ~c.robot)[::stride, ::stride]] for c in work]
        planes = self.planes.find(np.concatenate(free))
        if not planes:
            diagnostics.append("no support plane found: everything that is not the robot is an obstacle")
        lap("planes")
        if self.recogniser is not None:
            for cam in work:
                cam.named = self.recogniser.recognise(cam.view)
            lap("recognise")
        for cam in work:
            self._segment(cam, planes)
        lap("segment")
        support_height = planes[0].height_m if planes else 0.0
        for cam in work:
            rest = cam.segments[len(cam.preset) :]
            cam.names = [*cam.preset, *self.labeller.label_segments(rest, support_height)]
        lap("label")
        objects = self._fuse(work, planes)
        lap("fuse")
        if self.namer is not None:
            images = [(c.view.rgb, c.instances) for c in work if c.view.rgb is not None]
            objects, notes = self.namer.rename(objects, images, stamp_s)
            diagnostics.extend(notes)
            lap("name")
        timings["total"] = (time.perf_counter() - started) * 1000.0
        segmentations = {
            c.view.camera: CameraSegmentation(
                c.view.camera, c.view.stamp_s, c.instances, self._labels(c, planes, objects)
            )
            for c in work
        }
        hidden = self._out_of_view(work, planes[0].height_m if planes else None)
        return PerceptionResult(stamp_s, segmentations, objects, planes, diagnostics, timings, hidden)

    def _out_of_view(self, work: list[_CameraWork], table_m: float | None) -> tuple[str, ...]:
        """The named locations no camera sees now: less than `in_view_share` of a sample of the
        region (at the table's height) lands on a usable, non-robot pixel of any camera."""
        if table_m is None:
            return tuple(sorted(self.locations))  # no table found: no region can be told seen
        out = []
        for name, where in sorted(self.locations.items()):
            views = [region_seen(c.view, c.valid & ~c.robot, where.center, where.size, table_m) for c in work]
            if np.logical_or.reduce(views).mean() < self.params.in_view_share:
                out.append(name)
        return tuple(out)

    def _segment(self, cam: _CameraWork, planes: list[SupportPlane]) -> None:
        p = self.params
        free = cam.valid & ~cam.robot
        instances = np.zeros(free.shape, dtype=np.int32)
        instances[cam.robot] = ROBOT_ID
        flat = cam.points.reshape(-1, 3)
        if planes:
            above = np.full(free.shape, np.inf)
            on_plane = np.full(free.shape, -1, dtype=np.intp)
            for i, plane in enumerate(planes):
                height = plane.signed_distance(flat).reshape(free.shape)
                over = within_extent(plane, flat, p.extent_margin_m).reshape(free.shape) & (
                    height > -p.planes.distance_m
                )
                closer = over & (height < above)
                above = np.where(closer, height, above)
                on_plane = np.where(closer, i, on_plane)
            support = free & (on_plane >= 0) & (above <= p.min_object_height_m)
            for i in range(len(planes)):
                instances[support & (on_plane == i)] = TABLE_ID if i == 0 else PLANE_ID_BASE + i - 1
            candidate = free & (on_plane >= 0) & (above > p.min_object_height_m) & (above <= p.max_object_height_m)
        else:
            candidate = free
        assert cam.view.rgb is not None and cam.view.depth is not None
        assert cam.view.intrinsics is not None
        named, cam.preset, claimed = named_segments(
            cam.named, candidate, cam.points, cam.view.rgb, self.params.named_min_share
        )
        candidate &= ~claimed
        focal = float(cam.view.intrinsics[0, 0])
        segments = segment_image(cam.view.rgb, cam.view.depth, cam.points, candidate, p.segments, focal_px=focal)
        segments = self._robot_leaks(cam, segments, instances)
        cam.segments = mark_partial([*named, *segments], np.asarray(cam.view.depth), cam.robot)
        cam.instances = instances

    def _robot_leaks(
        self, cam: _CameraWork, segments: list[Segment], instances: npt.NDArray[np.int32]
    ) -> list[Segment]:
        """Tiny segments (at most `leak_px` pixels) that border the robot in the image and lie
        within `leak_m` of its points are the robot's own silhouette pixels the self-filter's
        margin missed (a model a little off the real arm): they become robot, never an
        obstacle in the fingers."""
        p = self.params
        if not cam.robot.any():
            return segments
        near_robot = np.zeros_like(cam.robot)
        near_robot[1:] |= cam.robot[:-1]
        near_robot[:-1] |= cam.robot[1:]
        near_robot[:, 1:] |= cam.robot[:, :-1]
        near_robot[:, :-1] |= cam.robot[:, 1:]
        tree: cKDTree | None = None
        kept = []
        for segment in segments:
            if len(segment.pixels) <= p.leak_px and near_robot.reshape(-1)[segment.pixels].any():
                if tree is None:
                    tree = cKDTree(cam.points[cam.robot])
                distance, _ = tree.query(segment.points, k=1)
                if float(np.max(distance)) <= p.leak_m:
                    cam.robot.reshape(-1)[segment.pixels] = True
                    instances.reshape(-1)[segment.pixels] = ROBOT_ID
                    continue
            kept.append(segment)
        return kept

    def _fuse(self, work: list[_CameraWork], planes: list[SupportPlane]) -> list[PerceivedObject]:
        """One object per label over the cameras once they agree (core/fuse.py); an unidentified
        segment that another camera sees as a named object (most of its points on it) joins it (a close-up in
        the wrist camera the catalog cannot name, the scene camera can); other unidentified
        ones fuse by proximity. Track ids are written into each camera's instance image."""
        named: dict[str, list[_Member]] = {}
        loose: list[_Member] = []
        for cam in work:
            for segment, (label, score) in zip(cam.segments, cam.names, strict=True):
                if label is None:
                    loose.append((cam, segment, score))
                else:
                    named.setdefault(label, []).append((cam, segment, score))
        p = self.params
        named, detached = reconcile(named, share=p.seen_as_share, within_m=p.seen_as_m, apart_m=p.fuse_apart_m)
        loose.extend(detached)
        trees = {
            label: [(m[0], cKDTree(m[1].points)) for m in members if len(m[1].points)]
            for label, members in named.items()
        }
        groups: list[tuple[str | None, list[_Member]]] = []
        groups.extend(named.items())
        for cam, segment, score in loose:
            label = self._seen_as(cam, segment, trees)
            if label is not None:
                named[label].append((cam, segment, score))
                continue
            centroid = segment.points.mean(axis=0)
            near = next(
                (
                    g
                    for g in groups
                    if g[0] is None
                    and all(m[0] is not cam for m in g[1])
                    and np.linalg.norm(np.concatenate([m[1].points for m in g[1]]).mean(axis=0) - centroid)
                    <= self.params.fuse_unknown_m
                ),
                None,
            )
            if near is not None:
                near[1].append((cam, segment, score))
            else:
                groups.append((None, [(cam, segment, score)]))
        clouds = [np.concatenate([m[1].points for m in members]) for _, members in groups]
        tracks = self.tracker.assign([g[0] for g in groups], [c.mean(axis=0) for c in clouds])
        objects = []
        for (_, members), cloud, track in zip(groups, clouds, tracks, strict=True):
            for cam, segment, _ in members:
                cam.instances.reshape(-1)[segment.pixels] = track.track_id
            centroid = cloud.mean(axis=0)
            objects.append(
                PerceivedObject(
                    track_id=track.track_id,
                    label=track.label,
                    score=float(max(m[2] for m in members)),
                    points=cloud,
                    cameras=tuple(dict.fromkeys(m[0].view.camera for m in members)),
                    region=region_of((float(centroid[0]), float(centroid[1])), dict(self.locations)),
                )
            )
        return [_with_support(o, objects, planes) for o in objects]

    def _seen_as(
        self, cam: _CameraWork, segment: Segment, trees: dict[str, list[tuple[_CameraWork, _Tree]]]
    ) -> str | None:
        """The named object of another camera that most of this segment's points lie on."""
        best, share = None, self.params.seen_as_share
        for label, views in trees.items():
            for other, tree in views:
                if other is cam or len(segment.points) == 0:
                    continue
                on = share_on(segment.points, tree, self.params.seen_as_m)
                if on >= share:
                    best, share = label, on
        return best

    @staticmethod
    def _labels(cam: _CameraWork, planes: list[SupportPlane], objects: list[PerceivedObject]) -> dict[int, str]:
        labels = {ROBOT_ID: ROBOT_LABEL}
        for i, plane in enumerate(planes):
            labels[TABLE_ID if i == 0 else PLANE_ID_BASE + i - 1] = plane.label
        present = set(np.unique(cam.instances).tolist())
        labels.update({o.track_id: o.label for o in objects if o.track_id in present})
        return labels


def _with_support(obj: PerceivedObject, objects: list[PerceivedObject], planes: list[SupportPlane]) -> PerceivedObject:
    """What `obj` rests on: a larger object around its centre whose extent holds its bottom
    (meat on a plate, a carrot in a bowl), else a support plane its lowest points touch, else
    '' (held, or resting on nothing seen)."""
    bottom = float(np.sort(obj.points[:, 2])[:5].mean())
    centre = obj.centroid
    low, high = obj.bbox
    footprint = float(np.prod(high[:2] - low[:2]))
    for other in objects:
        if other is obj:
            continue
        o_low, o_high = other.bbox
        around = bool(np.all(o_low[:2] <= centre[:2]) and np.all(centre[:2] <= o_high[:2]))
        larger = float(np.prod(o_high[:2] - o_low[:2])) > footprint
        if around and larger and float(o_low[2]) - 0.005 <= bottom <= float(o_high[2]) + 0.02:
            return replace(obj, support=other.label)
    for plane in planes:
        lowest = float(np.sort(plane.signed_distance(obj.points))[:5].mean())
        if lowest <= 0.02 and within_extent(plane, obj.points, 0.0).any():
            return replace(obj, support=plane.label)
    return obj
