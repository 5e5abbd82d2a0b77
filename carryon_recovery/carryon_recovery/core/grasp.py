"""Grasp and path geometry of the base recovery skill (paper §D.1): grasp candidates from
the target's points, and transit paths over the obstacles. World frame, metres, radians.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.spatial import cKDTree

from carryon_recovery.core.library import SkillVersion
from carryon_robot.core.clearance import CARRIED_CLEARANCE_M, FINGER_CLEARANCE_M, HAND_CLEARANCE_M
from carryon_robot.core.hand import FINGER_Y, FINGER_Z, HAND_BOXES, box_distance, finger_boxes

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
# The shield's distances (the robot model's clearances, its defaults; config/nodes/shield_node.yaml):
# fingers and hand closer than these to an obstacle are refused.
FINGER_THRESHOLD_M = FINGER_CLEARANCE_M
HAND_THRESHOLD_M = HAND_CLEARANCE_M
CARRIED_THRESHOLD_M = CARRIED_CLEARANCE_M
SQUEEZE_SAMPLES = 6  # angles at which the turn a closing grasp gives the object is checked
SLACK_M = 0.005  # a pose needs this beyond them (the tracking error the shield predicts, its own view)
TURNS_RAD = (0.0, 0.5, -0.5)  # finger axis turned about the vertical from across the narrow axis (crowded only)
MAX_TOP_DOWN = 3  # top-down candidates tried per attempt (each costs an approach and a descent)


SUPPORT_SLACK_M = 0.003  # points this little above the support surface are that surface


def grasp_margin(candidate: Candidate, obstacles: FloatArray | None, floor_z: float) -> float:
    """How far the hand at `candidate`'s grasp (fingers opened to its aperture) stays beyond
    the shield's distances: the smaller of (fingers' distance - FINGER_THRESHOLD_M) and
    (palm's and flange's distance - HAND_THRESHOLD_M) to the obstacle points standing above
    the surface the object rests on (`floor_z`: the table, or the plate it lies on); the
    hand as the shield models it (its boxes). inf when no obstacle is seen; below SLACK_M
    the shield would likely refuse the pose."""
    if obstacles is None or not len(obstacles):
        return math.inf
    standing = obstacles[obstacles[:, 2] > floor_z + SUPPORT_SLACK_M]
    if not len(standing):
        return math.inf
    local = (standing - candidate.grasp) @ candidate.rotation

    def nearest(boxes: list[tuple[tuple[float, float, float], tuple[float, float, float]]]) -> float:
        return min(float(box_distance(local, np.array(lo), np.array(hi)).min()) for lo, hi in boxes)

    fingers, hand = nearest(finger_boxes(candidate.aperture_m)), nearest(list(HAND_BOXES))
    return min(fingers - float(FINGER_THRESHOLD_M), hand - float(HAND_THRESHOLD_M))


def squeeze_clearance(
    points: FloatArray, pivot_xy: FloatArray, turn: float, obstacles: FloatArray | None, floor_z: float
) -> float:
    """The nearest the object's `points` come to the obstacle points standing above
    `floor_z` while fingers closing turned `turn` from across its narrow axis square it up
    to themselves: it turns by `turn` about the vertical through the grasp (`pivot_xy`).
    The shield cannot refuse this: it sees an arm standing still, closing its gripper (a
    carrot 2 cm from a plate's rim, grasped with the fingers turned 0.5 rad, swung its end
    into the rim, twice in one demo run). Horizontal distances to what stands beside it, up
    to its top. inf when nothing stands near or `turn` is 0."""
    if not turn or obstacles is None or not len(obstacles):
        return math.inf
    # What stands beside the object, up to its top: the cameras see its top, and its unseen
    # flanks reach down to the surface it lies on, so distances are horizontal.
    top = float(points[:, 2].max())
    beside = obstacles[(obstacles[:, 2] > floor_z + SUPPORT_SLACK_M) & (obstacles[:, 2] <= top + CARRIED_THRESHOLD_M)]
    if not len(beside):
        return math.inf
    tree = cKDTree(beside[:, :2])
    relative = points[:, :2] - pivot_xy
    nearest = math.inf
    for angle in np.linspace(0.0, turn, SQUEEZE_SAMPLES)[1:]:
        c, s = math.cos(angle), math.sin(angle)
        distances, _ = tree.query(relative @ np.array([[c, s], [-s, c]]) + pivot_xy)  # turned by +angle
        nearest = min(nearest, float(np.min(distances)))
    return nearest


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
    grasped by the top `KNOB_SLICE_M` of its points instead (its knob). Those the shield
    would accept come first (`grasp_margin`, the hand as the shield models it, at least
    `SLACK_M`): straight across the object, the centre first; when a straight one would be
    refused (a finger on a bottle or a plate's rim), also with the fingers turned `TURNS_RAD`
    about the vertical; those it would refuse only when it would accept none, the freest
    first. At most `MAX_TOP_DOWN`. The fingers are pre-shaped: opened to the width between
    them plus `FINGER_MARGIN_M` either side, not 8 cm.

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
    xy = points[:, :2] - centre[:2]
    along = xy @ long
    spots = [centre[:2]]
    length = float(np.percentile(along, 97) - np.percentile(along, 3))
    if length > 2.0 * 2.0 * half_width:  # elongated (a carrot: 92 x 32 mm): also grasp nearer its ends
        spots += [centre[:2] + long * length / 4.0, centre[:2] - long * length / 4.0]
    lift = np.array([0.0, 0.0, version.value("approach_offset_m")])

    def at(turn: float) -> list[tuple[int, Candidate]]:
        c, s = math.cos(turn), math.sin(turn)
        axis = np.array([c * narrow[0] - s * narrow[1], s * narrow[0] + c * narrow[1]])  # finger axis in xy
        rotation = tool_rotation(math.atan2(-axis[0], axis[1]))  # tool x along `axis`
        out = []
        for spot_index, spot in enumerate(spots):
            grasp_xy, half = _slice(points, spot, axis)
            if half is not None:
                # Pre-shaped: open only the width between the fingers plus a finger's room either
                # side (a carrot beside a plate or a bottle leaves no room for fingers opened 8 cm).
                aperture = min(GRIPPER_OPENING_M, 2.0 * (half + FINGER_MARGIN_M))
                grasp = np.array([grasp_xy[0], grasp_xy[1], z])
                out.append((spot_index, Candidate("top_down", grasp, rotation, grasp + lift, aperture)))
        return out

    # Those the shield would accept (`grasp_margin` at least SLACK_M) straight across the object
    # first, nearest its middle first: a carrot held by an end or at a slant slips out on the
    # way. The fingers turned only when a straight grasp would be refused; the rest only when
    # no grasp would be accepted, the freest first.
    ranked: list[tuple[tuple[float, ...], Candidate]] = []
    for turn_index, turn in enumerate(TURNS_RAD):
        if turn_index and all(key[0] == 0 for key, _ in ranked):
            break
        for spot_index, candidate in at(turn):
            if squeeze_clearance(points, candidate.grasp[:2], turn, obstacles, bottom) < CARRIED_THRESHOLD_M:
                continue  # closing would swing the object into what stands beside it: never offered
            margin = grasp_margin(candidate, obstacles, bottom)
            ranked.append(((0, turn_index, spot_index) if margin >= SLACK_M else (1, -margin), candidate))
    ranked.sort(key=lambda item: item[0])
    if ranked and ranked[0][0][0] == 0:
        ranked = [item for item in ranked if item[0][0] == 0]
    return [candidate for _, candidate in ranked[:MAX_TOP_DOWN]]


def _slice(points: FloatArray, spot: FloatArray, axis: FloatArray) -> tuple[FloatArray, float | None]:
    """What the fingers close on at `spot` with the finger axis `axis` (unit xy): the
    object's points between the finger pads, centred along the axis; its half width along
    the axis (95th percentile), None when no point lies between the pads."""
    offset = points[:, :2] - spot
    across = offset @ np.array([-axis[1], axis[0]])
    between = offset[np.abs(across) <= FINGER_Y[1] + 0.005] @ axis
    if len(between) < 3:
        return spot, None
    middle = 0.5 * (float(np.percentile(between, 97)) + float(np.percentile(between, 3)))
    half = float(np.percentile(np.abs(between - middle), 95))
    return spot + middle * axis, half


NUDGE_TIP_ABOVE_M = 0.008  # fingertips at least this far above the surface the object rests on while nudging it
NUDGE_REACH_M = 0.06  # only an obstacle this close (xy) to the object is nudged away from
NUDGE_MIN_M, NUDGE_MAX_M = 0.02, 0.06  # how far the object is pushed
NUDGE_SHIFTS_M = (0.0, 0.025, -0.025, 0.04, -0.04)  # where along the gap the fingers go down (room for the palm)


@dataclass(frozen=True)
class Nudge:
    """Push the object away from what crowds it, with the closed fingers put down in the gap
    between them: pre (above start) -> start -> end -> up (above end). Tool y (the fingers'
    2 cm side) points along the push, so the closed fingers' 5 cm side lies along the gap."""

    rotation: FloatArray
    pre: FloatArray
    start: FloatArray
    end: FloatArray
    up: FloatArray
    margin_m: float  # `grasp_margin` of the closed hand at `start`


def nudge_away(
    points: FloatArray, obstacles: FloatArray | None, floor_z: float, distance_m: float, approach_m: float
) -> Nudge | None:
    """A nudge of the object (its points) `distance_m` (clipped to NUDGE_MIN_M..NUDGE_MAX_M)
    straight away from the nearest obstacle point standing beside it (within NUDGE_REACH_M):
    the closed fingers go down against the object's side facing it, their tips at half its
    height (at least NUDGE_TIP_ABOVE_M: the palm then clears a plate's rim), at the place
    along the gap (`NUDGE_SHIFTS_M`, within the object's length) where the hand keeps the
    largest `grasp_margin`; None when nothing crowds the object or the hand does not fit
    anywhere (margin below SLACK_M)."""
    if obstacles is None or not len(obstacles) or len(points) < 3:
        return None
    tip_z = floor_z + max(NUDGE_TIP_ABOVE_M, 0.5 * (float(points[:, 2].max()) - floor_z))
    standing = obstacles[obstacles[:, 2] > floor_z + SUPPORT_SLACK_M]
    if not len(standing):
        return None
    gaps = np.asarray(cKDTree(points[:, :2]).query(standing[:, :2])[0])  # each standing point to the object
    k = int(np.argmin(gaps))
    if gaps[k] > NUDGE_REACH_M:
        return None
    centre = points[:, :2].mean(axis=0)
    push = centre - standing[k, :2]
    if float(np.linalg.norm(push)) < 1e-6:
        return None
    push /= float(np.linalg.norm(push))
    along = np.array([-push[1], push[0]])
    extent = (points[:, :2] - centre) @ along
    rotation = tool_rotation(math.atan2(push[1], push[0]))  # tool x across the push, tool y along it
    best: tuple[float, FloatArray] | None = None
    for shift in NUDGE_SHIFTS_M:
        if not extent.min() <= shift <= extent.max():
            continue
        side = points[np.abs(extent - shift) <= FINGER_Y[1]]  # what the fingers' 2 cm meet there
        if not len(side):
            continue
        edge = float(np.min((side[:, :2] - centre) @ push))  # its side facing the obstacle (< 0)
        xy = centre + along * shift + push * (edge - FINGER_Y[1])  # the closed fingers against it
        start = np.array([xy[0], xy[1], tip_z + FINGER_Z[1]])  # tool z points down: the tips are below
        margin = grasp_margin(Candidate("nudge", start, rotation, start, aperture_m=0.0), obstacles, floor_z)
        if best is None or margin > best[0]:
            best = (margin, start)
    if best is None or best[0] < SLACK_M:
        return None
    margin, start = best
    shift_m = float(np.clip(distance_m, NUDGE_MIN_M, NUDGE_MAX_M))
    end = start + np.array([push[0], push[1], 0.0]) * shift_m
    rise = np.array([0.0, 0.0, approach_m])
    return Nudge(rotation, start + rise, start, end, end + rise, margin)


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
