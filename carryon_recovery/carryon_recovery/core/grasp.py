"""Grasp and path geometry of the base recovery skill (paper §D.1): grasp candidates from
the target's points, and transit paths over the obstacles. World frame, metres, radians.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from carryon_recovery.core.library import SkillVersion

FloatArray = npt.NDArray[np.float64]
DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])  # tool z down, finger axis along world y


def tool_rotation(yaw: float) -> FloatArray:
    """A downward tool rotated by `yaw` about world z."""
    c, s = math.cos(yaw), math.sin(yaw)
    rz = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    out: FloatArray = rz @ DOWN
    return out


@dataclass(frozen=True)
class Candidate:
    kind: str
    grasp: FloatArray  # tool centre point at the grasp
    rotation: FloatArray
    pre_grasp: FloatArray
    aperture_m: float = 0.08  # how far the fingers open for the approach and descent (pre-shaped)

    @property
    def open_command(self) -> float:
        """The gripper command (0 open .. 1 closed) of the pre-shaped opening."""
        return 1.0 - min(max(self.aperture_m / GRIPPER_OPENING_M, 0.0), 1.0)


GRIPPER_OPENING_M = 0.08  # the Panda's fingers open this far
FINGER_MARGIN_M = 0.015  # room a finger needs beside the object, metres
CLEAR_M = 0.02  # fingers this far (xy) from every obstacle point: the centre grasp is kept first


def finger_clearance(
    grasp: FloatArray, across: FloatArray, half_width: float, obstacles: FloatArray | None, floor_z: float
) -> float:
    """Horizontal distance from the two fingertips of a top-down grasp (at `grasp`, closing
    along the unit xy vector `across`, opened `half_width` + margin either side) to the
    nearest obstacle point standing above `floor_z`; inf when none is seen."""
    if obstacles is None or not len(obstacles):
        return math.inf
    standing = obstacles[obstacles[:, 2] > floor_z + 0.01, :2]
    if not len(standing):
        return math.inf
    offset = (half_width + FINGER_MARGIN_M) * across
    fingers = np.array([grasp[:2] + offset, grasp[:2] - offset])
    return float(np.min(np.linalg.norm(standing[None, :, :] - fingers[:, None, :], axis=2)))


MAX_CLOSE_WIDTH_M = GRIPPER_OPENING_M - 2 * FINGER_MARGIN_M  # a top-down grasp closes on at most this ...
KNOB_SLICE_M = 0.02  # ... wider objects are grasped by the top slice of this height (a knob, a handle)
SIDE_MIN_HEIGHT_M = 0.06  # objects at least this tall also get side candidates ...
SIDE_MAX_WIDTH_M = GRIPPER_OPENING_M - 0.01  # ... when they fit between the open fingers with room to spare
BASE_XY = np.zeros(2)  # the arm's base in world (x, y): side grasps reach outward from it


def side_rotation(direction: FloatArray) -> FloatArray:
    """Tool z along the horizontal `direction` (towards the object), fingers closing
    horizontally across it, tool y up."""
    d = np.array([direction[0], direction[1], 0.0]) / float(np.linalg.norm(direction[:2]))
    x = np.array([-d[1], d[0], 0.0])
    out: FloatArray = np.column_stack([x, np.cross(d, x), d])
    return out


def grasp_candidates(
    points: FloatArray, version: SkillVersion, support_z: float | None = None, obstacles: FloatArray | None = None
) -> list[Candidate]:
    """Candidates from the target's points, in the skill's `candidate_order`.

    top_down: the fingers closing across the object's narrow horizontal axis, over the
    points' centre — and for an elongated object also a quarter of its length either way
    along it — `grasp_height_m` above the surface it rests on (`support_z`; else its lowest
    seen point), at most 5 mm under its top; an object too wide to close on (a cloche) is
    grasped by the top `KNOB_SLICE_M` of its points instead (its knob). The centre comes
    first unless a finger there would come within `CLEAR_M` of an obstacle (an object lying
    against a bottle): then they go by finger clearance, the freest first. The fingers are
    pre-shaped: opened to the object's width plus `FINGER_MARGIN_M` either side, not 8 cm.

    side: for objects at least `SIDE_MIN_HEIGHT_M` tall (a can, a cup; a low object's side
    is too close to the table for the hand) and at most `SIDE_MAX_WIDTH_M` wide (the fingers
    close across its whole width), the tool horizontal at half the object's height,
    reaching from the arm's base towards its centre, then 45 degrees either way; the
    pre-grasp is `approach_offset_m` back along the reach.
    """
    if len(points) < 3:
        return []
    centre = points.mean(axis=0)
    top = float(points[:, 2].max())
    bottom = support_z if support_z is not None else float(points[:, 2].min())
    candidates: list[Candidate] = []
    for kind in version.strategy.candidate_order:
        if kind == "top_down":
            candidates += _top_down(points, centre, top, bottom, version, obstacles=obstacles)
        elif kind == "side" and top - bottom >= SIDE_MIN_HEIGHT_M and _width(points, centre) <= SIDE_MAX_WIDTH_M:
            candidates += _side(centre, top, bottom, version)
    return candidates


def _top_down(
    points: FloatArray,
    centre: FloatArray,
    top: float,
    bottom: float,
    version: SkillVersion,
    *,
    obstacles: FloatArray | None,
) -> list[Candidate]:
    narrow, long, half_width = _axes(points, centre)
    z = min(bottom + version.value("grasp_height_m"), max(top - 0.005, bottom))
    crown = points[points[:, 2] > top - KNOB_SLICE_M]
    if 2.0 * half_width > MAX_CLOSE_WIDTH_M and len(crown) >= 3:
        # too wide to close on (a cloche): grasp what stands on its top — a knob, a handle
        points, centre, z = crown, crown.mean(axis=0), top - 0.5 * KNOB_SLICE_M
        narrow, long, half_width = _axes(points, centre)
    yaw = math.atan2(-narrow[0], narrow[1])  # finger axis (tool x) along `narrow`
    xy = points[:, :2] - centre[:2]
    along = xy @ long
    spots = [centre[:2]]
    length = float(np.percentile(along, 97) - np.percentile(along, 3))
    if length > 2.0 * 2.0 * half_width:  # elongated (a carrot: 92 x 32 mm): also grasp nearer its ends
        spots += [centre[:2] + long * length / 4.0, centre[:2] - long * length / 4.0]
    rotation = tool_rotation(yaw)
    lift = np.array([0.0, 0.0, version.value("approach_offset_m")])
    # Pre-shaped: open only the object's width plus a finger's room either side (a carrot
    # beside a plate or a bottle leaves no room for fingers opened 8 cm).
    aperture = min(GRIPPER_OPENING_M, 2.0 * (half_width + FINGER_MARGIN_M))
    candidates = [
        Candidate("top_down", np.array([x, y, z]), rotation, np.array([x, y, z]) + lift, aperture) for x, y in spots
    ]
    clearance = [finger_clearance(c.grasp, narrow, half_width, obstacles, bottom) for c in candidates]
    if clearance[0] < CLEAR_M:
        order = sorted(range(len(candidates)), key=lambda i: -clearance[i])
        candidates = [candidates[i] for i in order]
    return candidates


def _axes(points: FloatArray, centre: FloatArray) -> tuple[FloatArray, FloatArray, float]:
    """The points' narrow and long horizontal axes (unit xy vectors) and their half width
    across the narrow one (95th percentile)."""
    xy = points[:, :2] - centre[:2]
    _, vectors = np.linalg.eigh(xy.T @ xy)
    narrow, long = vectors[:, 0], vectors[:, 1]
    return narrow, long, float(np.percentile(np.abs(xy @ narrow), 95))


def _width(points: FloatArray, centre: FloatArray) -> float:
    """Horizontal extent of the points: twice their 95th-percentile distance from the centre."""
    return 2.0 * float(np.percentile(np.linalg.norm(points[:, :2] - centre[:2], axis=1), 95))


def _side(centre: FloatArray, top: float, bottom: float, version: SkillVersion) -> list[Candidate]:
    outward = centre[:2] - BASE_XY
    heading = math.atan2(outward[1], outward[0])
    grasp = np.array([centre[0], centre[1], bottom + 0.5 * (top - bottom)])
    candidates = []
    for turn in (0.0, math.pi / 4, -math.pi / 4):
        direction = np.array([math.cos(heading + turn), math.sin(heading + turn)])
        pre = grasp - version.value("approach_offset_m") * np.array([direction[0], direction[1], 0.0])
        candidates.append(Candidate("side", grasp.copy(), side_rotation(direction), pre))
    return candidates


TRANSIT_MARGIN_M = 0.06  # tool centre point above the highest obstacle point under a transit
TRANSIT_CORRIDOR_M = 0.09  # obstacle points this close (xy) to the straight path count


def transit(
    start: FloatArray, goal: FloatArray, obstacles: FloatArray | None, *, margin_m: float = TRANSIT_MARGIN_M
) -> FloatArray:
    """A path start -> goal that goes up first, across at a transit height, then down: the
    transit height clears every obstacle point within `TRANSIT_CORRIDOR_M` (xy) of the
    straight path by `margin_m` (never lower than start or goal)."""
    z = max(float(start[2]), float(goal[2]))
    if obstacles is not None and len(obstacles):
        a, d = start[:2], goal[:2] - start[:2]
        length2 = float(d @ d)
        s = np.clip(((obstacles[:, :2] - a) @ d) / length2, 0.0, 1.0) if length2 > 1e-12 else np.zeros(len(obstacles))
        gap = np.linalg.norm(obstacles[:, :2] - (a + np.outer(s, d)), axis=1)
        under = obstacles[gap < TRANSIT_CORRIDOR_M]
        if len(under):
            z = max(z, float(under[:, 2].max()) + margin_m)
    up = np.array([start[0], start[1], z])
    over = np.array([goal[0], goal[1], z])
    out: FloatArray = np.vstack([line(start, up), line(up, over), line(over, goal)])
    return out


def line(start: FloatArray, end: FloatArray, step_m: float = 0.01) -> FloatArray:
    n = max(1, math.ceil(float(np.linalg.norm(end - start)) / step_m))
    out: FloatArray = start + np.outer(np.arange(1, n + 1) / n, end - start)
    return out
