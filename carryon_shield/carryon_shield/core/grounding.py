"""Grounding: RGB-D frames + the current task -> the obstacle set in the world frame.

Every grounder follows the same recipe (paper appendix C): back-project depth with the
intrinsics and camera pose; give every point an object name (from masks); drop the robot
(its mask, and anything inside the hand at the image's instant); keep the target's points
apart (exempt, and the carried geometry while holding); exempt the destination, the
permitted contacts and a local patch of the source support beneath the target; every
other point is an obstacle; downsample to one point per voxel; fuse all cameras.

Backends differ only in how pixels get names:
* `MaskGrounder`: a labelled instance segmentation (perception_node's, or the simulator's
  own as an oracle) and its label table.
* `TextPromptedGrounder`: an open-vocabulary segmenter prompted with the task's names (and
  the robot prompts); when text finds no mask for the target or destination, an optional
  `PointPrompter` (a VLM pointing at the object) seeds a depth-connected region.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
from scipy import ndimage
from scipy.spatial import cKDTree

from carryon_common.core import contact_rules as rules
from carryon_common.core.depth import backproject
from carryon_shield.core.types import (
    BoolArray,
    FloatArray,
    IntArray,
    ObstacleSet,
    PerceptionUnavailable,
    RgbdFrame,
    SelfFilter,
    TaskSpec,
)

ROBOT = "robot"
UNKNOWN = "unknown"  # pixels no mask claimed: obstacles with no name


def voxel_downsample(points: FloatArray, labels: IntArray, voxel_m: float) -> tuple[FloatArray, IntArray]:
    """One point per occupied voxel (the first seen) with its label. (N, 3) -> (M, 3)."""
    if len(points) == 0:
        return points, labels
    keys = np.floor(points / voxel_m).astype(np.int64)
    keys -= keys.min(axis=0)
    span = keys.max(axis=0) + 1
    flat = (keys[:, 0] * span[1] + keys[:, 1]) * span[2] + keys[:, 2]
    _, first = np.unique(flat, return_index=True)
    return points[first], labels[first]


def _xy_near(points: FloatArray, anchors: FloatArray, margin_m: float) -> npt.NDArray[np.bool_]:
    """Which points lie within `margin_m` horizontally of any anchor point."""
    if len(anchors) == 0 or len(points) == 0:
        return np.zeros(len(points), dtype=bool)
    distance, _ = cKDTree(anchors[:, :2]).query(points[:, :2], distance_upper_bound=margin_m)
    near: npt.NDArray[np.bool_] = np.isfinite(distance)
    return near


def _resting_on(
    points: FloatArray,
    label_of_point: IntArray,
    names: Sequence[str],
    target: npt.NDArray[np.bool_],
    candidates: npt.NDArray[np.bool_],
    *,
    floor: npt.NDArray[np.bool_],
    probe_m: float = 0.015,
) -> tuple[str, ...]:
    """What the target rests on, seen in the point cloud (`contact_rules.resting_on`, the
    rule the contact monitor applies to contacts): objects among `candidates` with points
    just under the target's lowest points (up to `SUPPORT_BELOW_M` below, `RESTING_ABOVE_M`
    above, within `probe_m` horizontally), none beside the target rising above its top (a
    bottle the carrot lies against is not; a plate's rim it lies on is), and none while it
    stands on the `floor` (support surfaces within 3 cm around it, less than `RESTING_ABOVE_M`
    below its lowest point: a low block beside a cube on the table is not a support)."""
    body = points[target]
    bottom, top = float(body[:, 2].min()), float(body[:, 2].max())
    around = floor & _xy_near(points, body, 0.03)
    if around.any() and bottom - float(np.median(points[around, 2])) < rules.RESTING_ABOVE_M:
        return ()
    lowest = body[body[:, 2] <= bottom + rules.RESTING_ABOVE_M]
    z = points[:, 2]
    under = (
        candidates
        & (z >= bottom - rules.SUPPORT_BELOW_M)
        & (z <= bottom + rules.RESTING_ABOVE_M)
        & _xy_near(points, lowest, probe_m)
    )
    ids, counts = np.unique(label_of_point[under], return_counts=True)
    beside = set(np.unique(label_of_point[candidates & (z > top) & _xy_near(points, body, probe_m)]).tolist())
    return tuple(names[i] for i, n in zip(ids.tolist(), counts.tolist(), strict=True) if n >= 3 and i not in beside)


@dataclass(frozen=True)
class GroundingParams:
    """voxel_m: output point spacing; stride: pixel stride of back-projection; max_depth_m:
    farther returns ignored; source_patch_margin_m: horizontal reach of the exempt
    support patch around the target's points; support_labels: what holds the target when
    the task's source is a named location (e.g. "kitchen_counter") rather than a segmented
    object: the patch is then taken from these labels."""

    voxel_m: float = 0.01
    stride: int = 2
    max_depth_m: float = 2.5
    source_patch_margin_m: float = rules.SUPPORT_MARGIN_M
    frame_id: str = "world"
    support_labels: tuple[str, ...] = rules.SUPPORT_SURFACES


def assemble(
    points: FloatArray,
    names_per_point: Sequence[str],
    label_of_point: IntArray,
    task: TaskSpec,
    *,
    params: GroundingParams,
    stamp_s: float,
    inside_robot: BoolArray | None = None,
    holding: bool = False,
    supports: rules.SupportTracker | None = None,
) -> ObstacleSet:
    """Named points (N, 3) -> ObstacleSet. `names_per_point[label_of_point[i]]` is point
    i's object; `inside_robot` (N,): points the self-filter found inside the robot's hand;
    `holding`: the gripper holds the target (then nothing it passes over counts as what it
    rests on); `supports`: the grounder's memory of what the target rested on before the
    grasp (None: none, so while holding only the source's patch is exempt)."""
    names = tuple(names_per_point)
    index_of = {name: i for i, name in enumerate(names)}

    def mask_of(*wanted: str) -> npt.NDArray[np.bool_]:
        ids = [index_of[n] for n in wanted if n in index_of]
        return np.isin(label_of_point, ids) if ids else np.zeros(len(points), dtype=bool)

    robot = mask_of(ROBOT)
    if inside_robot is not None:
        robot |= inside_robot
    target = mask_of(task.target) & ~robot
    exempt = target | mask_of(*(rules.touchable(task) - {task.target}))

    def resting_on() -> tuple[str, ...]:
        others = ~(robot | exempt | mask_of(UNKNOWN))
        floor = mask_of(*params.support_labels) & ~robot
        return _resting_on(points, label_of_point, names, target, others, floor=floor)

    # The support only as the patch at the target (contact_rules): once the target is
    # lifted, or for anything of it not beneath the target, it is an obstacle again.
    tracker = supports if supports is not None else rules.SupportTracker()
    holders = (
        tracker(task, known=index_of, held=holding, resting_on=resting_on, surfaces=params.support_labels)
        if target.any()
        else ()
    )
    if holders:
        bottom = float(points[target][:, 2].min())
        band = (points[:, 2] >= bottom - rules.SUPPORT_BELOW_M) & (points[:, 2] <= bottom + rules.SUPPORT_ABOVE_M)
        support = np.flatnonzero(mask_of(*holders) & band)
        exempt[support[_xy_near(points[support], points[target], params.source_patch_margin_m)]] = True
    keep = ~(robot | exempt)
    obstacle_points, obstacle_labels = voxel_downsample(points[keep], label_of_point[keep], params.voxel_m)
    target_points, _ = voxel_downsample(points[target], label_of_point[target], params.voxel_m)
    others = exempt & ~target  # the target's own points are target_points
    exempt_cloud, exempt_labels = voxel_downsample(points[others], label_of_point[others], params.voxel_m)
    return ObstacleSet(
        points=obstacle_points,
        label_index=obstacle_labels.astype(np.int32),
        names=names,
        stamp_s=stamp_s,
        frame_id=params.frame_id,
        target_points=target_points,
        exempt_points=int(exempt.sum()),
        robot_points=int(robot.sum()),
        exempt_cloud=exempt_cloud,
        exempt_label_index=exempt_labels.astype(np.int32),
        target_label=names.index(task.target) if task.target in names else -1,
    )


def fuse_labelled(
    frames: Sequence[RgbdFrame],
    labels_of: Callable[[RgbdFrame, npt.NDArray[np.intp]], IntArray],
    names: list[str],
    task: TaskSpec,
    *,
    params: GroundingParams,
    stamp_s: float,
    self_filter: SelfFilter | None,
    holding: bool = False,
    supports: rules.SupportTracker | None = None,
) -> ObstacleSet:
    """Back-project every frame, label each point with `labels_of(frame, flat pixel
    indices)` (indices into `names`), drop what `self_filter` finds inside the robot at
    the frame's instant, and assemble the fused obstacle set."""
    all_points, all_labels, inside = [], [], []
    for frame in frames:
        points, flat = backproject(
            frame.depth, frame.K, frame.world_from_camera, stride=params.stride, max_depth_m=params.max_depth_m
        )
        all_points.append(points)
        all_labels.append(labels_of(frame, flat))
        inside.append(self_filter(frame, points) if self_filter is not None else np.zeros(len(points), dtype=bool))
    return assemble(
        np.concatenate(all_points),
        names,
        np.concatenate(all_labels),
        task,
        params=params,
        stamp_s=stamp_s,
        inside_robot=np.concatenate(inside),
        holding=holding,
        supports=supports,
    )


class Grounder(Protocol):
    """Builds the obstacle set from fresh frames. Raises PerceptionUnavailable when it
    cannot (no depth, no masks); never returns a partial set silently."""

    name: str

    def ground(
        self,
        frames: Sequence[RgbdFrame],
        task: TaskSpec,
        self_filter: SelfFilter | None = None,
        *,
        holding: bool = False,
    ) -> ObstacleSet: ...


class MaskGrounder:
    """Names pixels with a labelled instance segmentation (id -> object name): perception_node's
    (`masks`), or the simulator's own as an evaluation oracle (`sim_truth`). Ids without a
    label are `unknown` (obstacles)."""

    def __init__(self, params: GroundingParams, name: str = "masks") -> None:
        self.params = params
        self.name = name
        self.supports = rules.SupportTracker()  # what the target rested on before the grasp

    def ground(
        self,
        frames: Sequence[RgbdFrame],
        task: TaskSpec,
        self_filter: SelfFilter | None = None,
        *,
        holding: bool = False,
    ) -> ObstacleSet:
        if not frames:
            raise PerceptionUnavailable("no camera frames")
        names: list[str] = [UNKNOWN]
        index_of = {UNKNOWN: 0}
        luts: dict[str, IntArray] = {}
        for frame in frames:
            if frame.segmentation is None:
                raise PerceptionUnavailable(f"camera {frame.camera!r}: no segmentation mask")
            lut = np.zeros(max([0, *frame.labels]) + 2, dtype=np.int32)  # unknown ids -> 0
            for seg_id, name in frame.labels.items():
                lut[seg_id] = index_of.setdefault(name, len(index_of))
                if len(names) < len(index_of):
                    names.append(name)
            luts[frame.camera] = lut

        def labels_of(frame: RgbdFrame, flat: npt.NDArray[np.intp]) -> IntArray:
            lut = luts[frame.camera]
            ids = np.asarray(frame.segmentation).reshape(-1)[flat]
            labels: IntArray = lut[np.where((ids >= 0) & (ids < len(lut)), ids, len(lut) - 1)]
            return labels

        stamp = min(min(f.depth_stamp_s, f.mask_stamp_s) for f in frames)
        return fuse_labelled(
            frames,
            labels_of,
            names,
            task,
            params=self.params,
            stamp_s=stamp,
            self_filter=self_filter,
            holding=holding,
            supports=self.supports,
        )


class Segmenter(Protocol):
    """Open-vocabulary segmentation: one boolean mask (H, W) per prompt (all-False when
    the prompt is not found). rgb: (H, W, 3) uint8."""

    def segment(self, rgb: npt.NDArray[np.uint8], prompts: Sequence[str]) -> dict[str, npt.NDArray[np.bool_]]: ...


class PointPrompter(Protocol):
    """A VLM asked to point at a named object: pixel (row, col) or None when it cannot."""

    def point(self, rgb: npt.NDArray[np.uint8], name: str) -> tuple[int, int] | None: ...


def region_from_point(
    depth: npt.NDArray[np.floating], seed: tuple[int, int], *, tolerance_m: float = 0.02, max_radius_px: int = 60
) -> npt.NDArray[np.bool_]:
    """The object around a pixel (e.g. where a VLM pointed): the connected pixels whose
    depth is within `tolerance_m` of the seed's, within `max_radius_px`. (H, W) bool."""
    height, width = depth.shape
    row, col = seed
    out = np.zeros(depth.shape, dtype=bool)
    if not (0 <= row < height and 0 <= col < width) or not np.isfinite(depth[row, col]) or depth[row, col] <= 0:
        return out
    r0, r1 = max(0, row - max_radius_px), min(height, row + max_radius_px + 1)
    c0, c1 = max(0, col - max_radius_px), min(width, col + max_radius_px + 1)
    window = np.asarray(depth[r0:r1, c0:c1], dtype=np.float64)
    close = np.abs(window - float(depth[row, col])) < tolerance_m
    regions, _ = ndimage.label(close)
    out[r0:r1, c0:c1] = regions == regions[row - r0, col - c0]
    return out


class TextPromptedGrounder:
    """Names pixels with an open-vocabulary segmenter prompted with the task's object
    names and the robot prompts. Unclaimed pixels are unnamed obstacles. When text finds
    no mask for the target or destination, `point_prompter` (if any) is asked to point at
    it and a depth-connected region around that pixel becomes its mask."""

    name = "text_prompted"

    def __init__(
        self,
        params: GroundingParams,
        segmenter: Segmenter,
        robot_prompts: Sequence[str],
        point_prompter: PointPrompter | None = None,
    ) -> None:
        self.params = params
        self.segmenter = segmenter
        self.robot_prompts = tuple(robot_prompts)
        self.point_prompter = point_prompter
        self.supports = rules.SupportTracker()  # what the target rested on before the grasp
        self.point_prompted: list[str] = []  # names found by pointing, most recent call (for events / tests)

    def masks(self, frame: RgbdFrame, task: TaskSpec) -> dict[str, npt.NDArray[np.bool_]]:
        """Object name (or ROBOT) -> mask (H, W) for one frame."""
        if frame.rgb is None:
            raise PerceptionUnavailable(f"camera {frame.camera!r}: text grounding needs a color image")
        objects = [n for n in (task.target, task.source, task.destination, *task.permitted) if n]
        found = self.segmenter.segment(frame.rgb, [*objects, *self.robot_prompts])
        out: dict[str, npt.NDArray[np.bool_]] = {}
        robot = np.zeros(frame.depth.shape, dtype=bool)
        for prompt in self.robot_prompts:
            robot |= found.get(prompt, robot)
        out[ROBOT] = robot
        for name in objects:
            mask = found.get(name)
            if (
                (mask is None or not mask.any())
                and self.point_prompter is not None
                and name
                in (
                    task.target,
                    task.destination,
                )
            ):
                seed = self.point_prompter.point(frame.rgb, name)
                if seed is not None:
                    mask = region_from_point(frame.depth, seed)
                    self.point_prompted.append(name)
            if mask is not None and mask.any():
                out[name] = mask
        return out

    def ground(
        self,
        frames: Sequence[RgbdFrame],
        task: TaskSpec,
        self_filter: SelfFilter | None = None,
        *,
        holding: bool = False,
    ) -> ObstacleSet:
        if not frames:
            raise PerceptionUnavailable("no camera frames")
        self.point_prompted = []
        names: list[str] = [UNKNOWN]
        label_images: dict[str, IntArray] = {}
        for frame in frames:
            masks = self.masks(frame, task)
            label_image = np.zeros(frame.depth.shape, dtype=np.int32)
            # Later names win overlaps: robot last, so the arm is never an obstacle.
            for name in sorted(masks, key=lambda n: n == ROBOT):
                if name not in names:
                    names.append(name)
                label_image[masks[name]] = names.index(name)
            label_images[frame.camera] = label_image.reshape(-1)
        stamp = min(f.depth_stamp_s for f in frames)
        return fuse_labelled(
            frames,
            lambda frame, flat: label_images[frame.camera][flat],
            names,
            task,
            params=self.params,
            stamp_s=stamp,
            self_filter=self_filter,
            holding=holding,
            supports=self.supports,
        )


def frames_by_camera(frames: Mapping[str, RgbdFrame], cameras: Sequence[str]) -> list[RgbdFrame]:
    """The frames of `cameras`, in order; PerceptionUnavailable naming any missing camera."""
    missing = [c for c in cameras if c not in frames]
    if missing:
        raise PerceptionUnavailable(f"no frames yet from camera(s): {', '.join(missing)}")
    return [frames[c] for c in cameras]
