"""The scores of `carryon bench perception` (definitions in carryon_bench.perception):
one camera's prediction against the simulator's truth (`score_camera`), and many cameras'
and frames' scores pooled with breakdowns (`Tally`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.optimize import linear_sum_assignment

from carryon_common.core.config import read_yaml
from carryon_common.core.depth import backproject
from carryon_perception.core.types import ROBOT_LABEL, TABLE_LABEL

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int32]
NOT_OBJECTS = (ROBOT_LABEL, TABLE_LABEL)


@dataclass(frozen=True)
class ScoreParams:
    min_pixels: int = 30  # truth objects with fewer visible pixels in a camera are not scored there
    min_size_m: float = 0.03  # mask IoU only for objects at least this large (largest extent), metres
    path_radius_m: float = 0.10  # obstacle points this close to the gripper's path count for recall, metres


@dataclass(frozen=True)
class Taxonomy:
    """`types`: object name -> object type; `sizes`: object name -> largest extent, metres."""

    types: Mapping[str, str]
    sizes: Mapping[str, float]

    def kind(self, label: str) -> str:
        """The type a label names: an object's type, else the label itself (a type name)."""
        return self.types.get(label, label)

    def same(self, label: str, name: str) -> bool:
        return label == name or self.kind(label) == self.kind(name)


def load_taxonomy(config_dir: Path) -> Taxonomy:
    """Types from every scene file (config/scenes/*.yaml), sizes from the sim judge's
    geometry file (max of diameter and height)."""
    types = {
        o["name"]: o["type"] for p in sorted((config_dir / "scenes").glob("*.yaml")) for o in read_yaml(p)["objects"]
    }
    geometry = read_yaml(config_dir / "judge" / "sim_objects.yaml")["objects"]
    sizes = {n: max(2.0 * float(g["radius_m"]), float(g["height_m"])) for n, g in geometry.items()}
    return Taxonomy(types, sizes)


@dataclass
class PointCounts:
    """Truth obstacle points near the gripper's path and what the prediction made of them:
    `kept` (an instance id != 0 not labelled `robot`: the shield avoids them), of them
    `as_objects` (labelled neither `robot` nor `table`); the misses, `missed_robot`
    (labelled `robot`) and `missed_none` (instance id 0), add up to `points - kept`."""

    points: int = 0
    kept: int = 0
    as_objects: int = 0
    missed_robot: int = 0
    missed_none: int = 0

    def __iadd__(self, other: PointCounts) -> PointCounts:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)
        return self

    def percent(self, part: int) -> float:
        return 100.0 * part / self.points if self.points else float("nan")


@dataclass
class CameraScore:
    """One camera's scores: per truth object (by name)."""

    iou: dict[str, float] = field(default_factory=dict)
    labelled: dict[str, str] = field(default_factory=dict)  # label of the best-overlapping instance ('' none)
    correct: dict[str, bool] = field(default_factory=dict)
    obstacles: dict[str, PointCounts] = field(default_factory=dict)  # objects with points near the path
    robot_iou: float = float("nan")  # the self-filter's mask against the robot's (NaN: robot not seen)


def distance_to_path(points: FloatArray, path: FloatArray) -> FloatArray:
    """Distance (N,) of points (N, 3) to the polyline `path` (M, 3), M >= 1; metres."""
    if len(path) == 1:
        out: FloatArray = np.linalg.norm(points - path[0], axis=1)
        return out
    a, ab = path[:-1], np.diff(path, axis=0)
    ap = points[:, None, :] - a[None, :, :]
    t = np.clip((ap * ab).sum(axis=2) / np.maximum((ab * ab).sum(axis=1), 1e-12), 0.0, 1.0)
    out = np.linalg.norm(ap - t[..., None] * ab, axis=2).min(axis=1)
    return out


def _overlaps(t: npt.NDArray[np.int64], p: npt.NDArray[np.int64]) -> dict[int, dict[int, int]]:
    """Shared pixels: truth id -> predicted id -> count."""
    keys, shared = np.unique((t << 32) | p, return_counts=True)
    overlap: dict[int, dict[int, int]] = defaultdict(dict)
    for key, n in zip(keys.tolist(), shared.tolist(), strict=True):
        overlap[key >> 32][key & 0xFFFFFFFF] = n
    return overlap


def _obstacles(
    truth: IntArray,
    truth_labels: Mapping[int, str],
    predicted: IntArray,
    predicted_labels: Mapping[int, str],
    *,
    geometry: tuple[npt.NDArray[np.float32], FloatArray, FloatArray, FloatArray],
    exempt: Collection[str],
    radius_m: float,
) -> dict[str, PointCounts]:
    """Obstacle points near the path per truth object, and what the prediction made of them."""
    depth, intrinsics, pose, path = geometry
    ids = [i for i, n in truth_labels.items() if i != 0 and n not in NOT_OBJECTS and n not in exempt]
    points, flat = backproject(depth, intrinsics, pose, mask=np.isin(truth, ids))
    near = flat[distance_to_path(points, path) <= radius_m]
    ids_t, ids_p = truth.ravel()[near], predicted.ravel()[near]

    def labelled(label: str) -> npt.NDArray[np.bool_]:
        return np.isin(ids_p, [i for i, n in predicted_labels.items() if i != 0 and n == label])

    robot, none = labelled(ROBOT_LABEL), ids_p == 0
    kept, table = ~(robot | none), labelled(TABLE_LABEL)
    out = {}
    for tid in np.unique(ids_t).tolist():
        of = ids_t == tid
        counts = (of.sum(), (of & kept).sum(), (of & kept & ~table).sum(), (of & robot).sum(), (of & none).sum())
        out[truth_labels[tid]] = PointCounts(*(int(c) for c in counts))
    return out


def score_camera(
    truth: IntArray,
    truth_labels: Mapping[int, str],
    predicted: IntArray,
    predicted_labels: Mapping[int, str],
    *,
    geometry: tuple[npt.NDArray[np.float32], FloatArray, FloatArray, FloatArray],
    taxonomy: Taxonomy,
    params: ScoreParams,
    exempt: Collection[str] = (),
) -> CameraScore:
    """Scores of one camera (see carryon_bench.perception). `truth`, `predicted`:
    (H, W) instance ids; `geometry`: depth (H, W) metres, K (3, 3), world_from_camera
    (4, 4), the gripper path (M, 3) in `world`; `exempt`: object names that are no
    obstacles in this frame (its target, what the gripper holds)."""
    if predicted.shape != truth.shape:
        raise ValueError(f"predicted instances {predicted.shape} differ from the camera's image {truth.shape}")
    depth, intrinsics, pose, _ = geometry
    overlap = _overlaps(truth.ravel().astype(np.int64), predicted.ravel().astype(np.int64))
    pids, pareas = np.unique(predicted, return_counts=True)
    area_p = dict(zip(pids.tolist(), pareas.tolist(), strict=True))
    out = CameraScore()
    groups: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for tid, name in truth_labels.items():
        area = sum(overlap.get(tid, {}).values())
        if tid == 0 or name in NOT_OBJECTS or area < params.min_pixels:
            continue
        best = max(((n, -i) for i, n in overlap[tid].items() if i != 0), default=None)
        out.labelled[name] = predicted_labels.get(-best[1], "") if best else ""
        out.correct[name] = best is not None and taxonomy.same(out.labelled[name], name)
        size = taxonomy.sizes.get(name)
        if size is None:  # not in the geometry file: the extent of what this camera sees of it
            seen, _ = backproject(depth, intrinsics, pose, mask=truth == tid)
            size = float(np.ptp(seen, axis=0).max()) if len(seen) else 0.0
        if size >= params.min_size_m:
            groups[taxonomy.kind(name)].append((tid, name))
    for kind, members in groups.items():
        candidates = [i for i, label in predicted_labels.items() if i != 0 and taxonomy.kind(label) == kind]
        iou = np.zeros((len(members), max(1, len(candidates))))
        for r, (tid, _) in enumerate(members):
            area_t = sum(overlap[tid].values())
            for c, pid in enumerate(candidates):
                inter = overlap[tid].get(pid, 0)
                iou[r, c] = inter / (area_t + area_p.get(pid, 0) - inter)
        out.iou.update({name: 0.0 for _, name in members})
        rows, cols = linear_sum_assignment(iou, maximize=True)
        out.iou.update({members[r][1]: float(iou[r, c]) for r, c in zip(rows, cols, strict=True)})
    robot_t = np.isin(truth, [i for i, n in truth_labels.items() if n == ROBOT_LABEL])
    robot_p = np.isin(predicted, [i for i, n in predicted_labels.items() if n == ROBOT_LABEL])
    if robot_t.any():
        out.robot_iou = float((robot_t & robot_p).sum() / (robot_t | robot_p).sum())
    out.obstacles = _obstacles(
        truth,
        truth_labels,
        predicted,
        predicted_labels,
        geometry=geometry,
        exempt=set(exempt),
        radius_m=params.path_radius_m,
    )
    return out


@dataclass
class Tally:
    """Scores of many cameras and frames, each row keyed by the groups it belongs to
    (camera, tag, situations) for breakdowns."""

    taxonomy: Taxonomy
    iou: list[tuple[str, tuple[str, ...], float]] = field(default_factory=list)  # (type, groups, IoU)
    labels: list[tuple[str, tuple[str, ...], str, bool]] = field(default_factory=list)  # (type, groups, said, ok)
    obstacles: list[tuple[str, tuple[str, ...], PointCounts]] = field(default_factory=list)  # (type, groups, counts)
    robot_iou: list[float] = field(default_factory=list)

    def add(self, score: CameraScore, groups: tuple[str, ...]) -> None:
        kind = self.taxonomy.kind
        self.iou += [(kind(n), groups, v) for n, v in score.iou.items()]
        self.labels += [(kind(n), groups, score.labelled[n], ok) for n, ok in score.correct.items()]
        self.obstacles += [(kind(n), groups, c) for n, c in score.obstacles.items()]
        if not np.isnan(score.robot_iou):
            self.robot_iou.append(score.robot_iou)

    def points(self, group: str | None = None, kind: str | None = None) -> PointCounts:
        """Obstacle point counts pooled over rows in `group` and of type `kind` (None: all)."""
        total = PointCounts()
        for k, g, counts in self.obstacles:
            if (group is None or group in g) and (kind is None or k == kind):
                total += counts
        return total

    def summary(self, group: str | None = None) -> dict[str, float]:
        """IoU mean, label accuracy (%), obstacle recall (%), the points labelled as
        objects (%), the misses (points) and the counts, over rows in `group` (all when
        None); NaN where nothing was scored."""
        iou = [v for _, g, v in self.iou if group is None or group in g]
        ok = [c for _, g, _, c in self.labels if group is None or group in g]
        obs = self.points(group)
        return {
            "iou_mean": float(np.mean(iou)) if iou else float("nan"),
            "iou_scored": len(iou),
            "label_accuracy": 100.0 * float(np.mean(ok)) if ok else float("nan"),
            "labels_scored": len(ok),
            "obstacle_recall": obs.percent(obs.kept),
            "obstacle_points": obs.points,
            "obstacle_points_labelled_as_objects": obs.percent(obs.as_objects),
            "obstacle_missed_robot": obs.missed_robot,
            "obstacle_missed_none": obs.missed_none,
        }

    def by_type(self) -> dict[str, dict[str, Any]]:
        """Per truth object type: IoU, what its objects were labelled, obstacle recall and
        the breakdown of its missed points."""
        kinds = {k for k, _, _ in self.iou} | {k for k, _, _, _ in self.labels} | {k for k, _, _ in self.obstacles}
        out: dict[str, dict[str, Any]] = {}
        for kind in sorted(kinds):
            iou = [v for k, _, v in self.iou if k == kind]
            said = Counter(s or "(none)" for k, _, s, _ in self.labels if k == kind)
            obs = self.points(kind=kind)
            out[kind] = {
                "iou_mean": float(np.mean(iou)) if iou else float("nan"),
                "iou_scored": len(iou),
                "labelled_as": dict(said.most_common()),
                "obstacle_recall": obs.percent(obs.kept),
                "obstacle_points": obs.points,
                "obstacle_points_labelled_as_objects": obs.percent(obs.as_objects),
                "obstacle_missed_robot": obs.missed_robot,
                "obstacle_missed_none": obs.missed_none,
            }
        return out
