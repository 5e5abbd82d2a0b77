"""Facts about objects from instance masks + depth (the `geometric` judge's eyes).

Perception fuses every camera that has depth, segmentation, intrinsics and a pose: each
labelled pixel is back-projected to a world point (carryon_common.core.depth, the same
code the shield's grounding uses), and points are grouped by object name through the
label table, so any segmentation source with the same interface (simulator masks, a
text-prompted segmenter on a robot) works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from carryon_common.core.clouds import object_clouds
from carryon_judge.core.geometry import ShapeTable
from carryon_judge.core.rules import NOT_OBJECTS, ObjectFacts, SceneFacts
from carryon_judge.core.types import Observation

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PerceptionParams:
    """stride: use every stride-th pixel; min_points: fewer points = not visible;
    open_width_m: a gripper at least this wide is open (holds nothing); hold_radius_m:
    an object with a point this close to the tool centre point of a closed gripper is held;
    inside_margin_m: how far above a container's rim an object still counts as in it;
    max_depth_m: ignore returns beyond this (metres)."""

    stride: int = 1
    min_points: int = 12
    open_width_m: float = 0.075
    hold_radius_m: float = 0.035
    inside_margin_m: float = 0.03
    max_depth_m: float = 3.0


def _center(points: FloatArray, role: str | None) -> FloatArray:
    """x, y of an object: the middle of the trimmed extent for hollow or flat hosts (a
    bowl's visible inside is lopsided), the median for items."""
    xy = points[:, :2]
    if role in ("container", "support", "cover"):
        lo, hi = np.percentile(xy, 2, axis=0), np.percentile(xy, 98, axis=0)
        return np.asarray((lo + hi) / 2, dtype=np.float64)
    return np.asarray(np.median(xy, axis=0), dtype=np.float64)


def facts_from_perception(
    observation: Observation, shapes: ShapeTable, params: PerceptionParams, source: str = "geometric"
) -> SceneFacts:
    """Facts from masks + depth (+ the gripper's state when known, for `held`)."""
    clouds = object_clouds(observation.views, stride=params.stride, max_depth_m=params.max_depth_m)
    robot = clouds.get("robot")
    ee, width = observation.ee_position, observation.gripper_width_m
    closed = width is not None and width < params.open_width_m
    raw: dict[str, ObjectFacts] = {}
    for name, points in clouds.items():
        if name in NOT_OBJECTS or len(points) < params.min_points:
            continue
        role = shapes.role(name)
        if ee is not None and width is not None:
            held = closed and float(np.min(np.linalg.norm(points - ee, axis=1))) < params.hold_radius_m
        else:  # no robot state: touching the robot's mask while off the table
            held = _touching(points, robot) and float(np.percentile(points[:, 2], 2)) > _floor(clouds) + 0.02
        raw[name] = ObjectFacts(
            name=name,
            visible=True,
            center=_center(points, role),
            bottom_z=float(np.percentile(points[:, 2], 2)),
            top_z=float(np.max(points[:, 2])),
            held=bool(held) and role not in ("obstacle",),
        )
    facts = {name: _with_host(f, raw, shapes, params) for name, f in raw.items()}
    return SceneFacts(facts, source)


def _floor(clouds: Mapping[str, FloatArray]) -> float:
    table = clouds.get("table")
    if table is not None and len(table):
        return float(np.median(table[:, 2]))
    return float(min(np.percentile(p[:, 2], 2) for p in clouds.values()))


def _touching(points: FloatArray, robot: FloatArray | None, within_m: float = 0.015) -> bool:
    if robot is None or not len(robot):
        return False
    lo, hi = points.min(axis=0) - within_m, points.max(axis=0) + within_m
    near = robot[np.all((robot >= lo) & (robot <= hi), axis=1)]
    if not len(near):
        return False
    sample = points[:: max(1, len(points) // 200)]
    distances = np.linalg.norm(sample[:, None, :] - near[None, :: max(1, len(near) // 400), :], axis=2)
    return bool(distances.min() < within_m)


def _with_host(
    facts: ObjectFacts, raw: Mapping[str, ObjectFacts], shapes: ShapeTable, params: PerceptionParams
) -> ObjectFacts:
    """The container / support whose volume holds the object's centre and base."""
    if shapes.role(facts.name) not in ("item", None):
        return facts
    best, best_distance = "", float("inf")
    for host, h in raw.items():
        shape = shapes.shapes.get(host)
        if host == facts.name or shape is None or shape.role not in ("container", "support"):
            continue
        distance = float(np.linalg.norm(facts.center - h.center))
        rim = h.bottom_z + shape.height_m + params.inside_margin_m
        if distance < shape.radius_m and h.bottom_z - 0.01 <= facts.bottom_z <= rim and distance < best_distance:
            best, best_distance = host, distance
    if not best:
        return facts
    return ObjectFacts(facts.name, facts.visible, facts.center, facts.bottom_z, facts.top_z, facts.held, best)
