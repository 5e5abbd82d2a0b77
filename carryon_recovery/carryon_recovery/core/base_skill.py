"""The base recovery skill (paper §D.1, Algorithm 2), driven by a versioned SkillVersion.

After a failed verdict the VLA is suspended and this skill restores the physical state the
interrupted subtask needs:

    relocalize (masks + depth) -> grasp candidates -> approach -> grasp -> lift
    -> check holding (measured width) -> transport to a stand-off pose above the
    destination -> check holding -> RESUME (the executive restarts the instruction)

When relocalization, a motion or a holding check fails, it retries with renewed
perception (strategy `retries_with_renewed_perception`), then falls back: move to the
candidate's pre-grasp pose (or the recorded pre-failure pose when there is no candidate),
open the gripper, and request resumption anyway (RESUME_UNVERIFIED) — the judge keeps
judging. Every motion goes through `RecoveryIO.move`, which on every backend passes the
shield (a blocked motion is a failed motion, never an unshielded one).

Every operation is recorded (planned vs measured) so reflection can review the attempt.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from carryon_recovery.core.library import SkillVersion
from carryon_recovery.core.reflection import Attempt, Operation
from carryon_recovery.core.types import Outcome

FloatArray = npt.NDArray[np.float64]
DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])  # tool z down, finger axis along world y
OPEN, CLOSED = 0.0, 1.0


def tool_rotation(yaw: float) -> FloatArray:
    """A downward tool rotated by `yaw` about world z."""
    c, s = math.cos(yaw), math.sin(yaw)
    rz = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    out: FloatArray = rz @ DOWN
    return out


@dataclass(frozen=True)
class Seen:
    """What relocalization found: the target's (and destination's) points, world frame."""

    target: FloatArray  # (N, 3)
    destination: FloatArray | None  # (M, 3) or None when not seen / not needed
    support_z: float | None = None  # height of the surface the target rests on (None: unknown)
    obstacles: FloatArray | None = None  # (K, 3) every other object's points (not the robot's), for transit heights


class RecoveryIO(Protocol):
    """What the skill needs from the robot (simulation or a real arm)."""

    def perceive(self, target: str, destination: str) -> Seen | None:
        """Fresh points of the target (None: not found) and of the destination."""

    def move(self, positions: FloatArray, rotation: FloatArray, gripper: float) -> tuple[bool, str]:
        """Move the tool through `positions` (n, 3) at `rotation` with the gripper command:
        steps from the motion backend (core/motion.py), every step through the shield;
        (reached, why not)."""

    def set_gripper(self, command: float) -> float:
        """Command the gripper (0 open .. 1 closed), wait for it to settle; the measured width, metres."""

    def tool_position(self) -> FloatArray:
        """Measured tool centre point (3,)."""


def support_height(clouds: dict[str, FloatArray], target: str, radius_m: float = 0.08) -> float | None:
    """Height of what the target rests on: the highest of the other objects' points (the
    robot's excluded) within `radius_m` of the target's centre and below its lowest point
    (median of the top 10 %), or None when nothing is seen there."""
    points = clouds[target]
    centre, bottom = points[:, :2].mean(axis=0), float(points[:, 2].min())
    below = []
    for name, cloud in clouds.items():
        if name in (target, "robot"):
            continue
        near = cloud[(np.linalg.norm(cloud[:, :2] - centre, axis=1) < radius_m) & (cloud[:, 2] < bottom)]
        if len(near):
            below.append(near[:, 2])
    if not below:
        return None
    heights = np.sort(np.concatenate(below))
    return float(np.median(heights[int(0.9 * len(heights)) :]))


def seen_from_clouds(clouds: dict[str, FloatArray], target: str, destination: str) -> Seen | None:
    """What relocalization found in per-object point clouds (None: the target is not seen):
    the target's and destination's points, the surface under the target, and every other
    object's points (the robot's excluded) as obstacles for transit heights."""
    points = clouds.get(target)
    if points is None:
        return None
    others = [c for name, c in clouds.items() if name not in (target, destination, "robot")]
    return Seen(
        points, clouds.get(destination) if destination else None, support_height(clouds, target),
        np.vstack(others) if others else None,
    )  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    kind: str
    grasp: FloatArray  # tool centre point at the grasp
    rotation: FloatArray
    pre_grasp: FloatArray


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
    against a bottle): then they go by finger clearance, the freest first.

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
    points: FloatArray, centre: FloatArray, top: float, bottom: float, version: SkillVersion, *,
    obstacles: FloatArray | None,
) -> list[Candidate]:  # fmt: skip
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
    candidates = [Candidate("top_down", np.array([x, y, z]), rotation, np.array([x, y, z]) + lift) for x, y in spots]
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
    out: FloatArray = np.vstack([_line(start, up), _line(up, over), _line(over, goal)])
    return out


def _line(start: FloatArray, end: FloatArray, step_m: float = 0.01) -> FloatArray:
    n = max(1, math.ceil(float(np.linalg.norm(end - start)) / step_m))
    out: FloatArray = start + np.outer(np.arange(1, n + 1) / n, end - start)
    return out


@dataclass
class RunRecord:
    operations: list[Operation] = field(default_factory=list)

    def add(self, op: str, ok: bool, planned: dict[str, object] | None = None,
            measured: dict[str, object] | None = None, note: str = "") -> bool:  # fmt: skip
        self.operations.append(Operation(op=op, ok=ok, planned=planned or {}, measured=measured or {}, note=note))
        return ok


def _r(v: FloatArray | float) -> object:
    return [round(float(x), 4) for x in v] if isinstance(v, np.ndarray) else round(float(v), 4)


@dataclass(frozen=True)
class SkillResult:
    outcome: Outcome
    message: str
    attempt: Attempt


def run_base_skill(
    version: SkillVersion,
    io: RecoveryIO,
    *,
    target: str,
    destination: str,
    instruction: str,
    pre_failure: FloatArray,
    attempt_id: str = "a1",
    cancelled: Callable[[], bool] = lambda: False,
    on_phase: Callable[[str], None] = lambda _phase: None,
) -> SkillResult:
    """Run one recovery attempt; never raises for a failed step (that is the fallback).
    `on_phase(name)` is called as each phase starts (relocalize, approach, grasp, lift,
    check_holding, transport, fallback): the Recover action's feedback."""
    record = RunRecord()
    tries = 1 + version.strategy.retries_with_renewed_perception
    last: Candidate | None = None
    obstacles: FloatArray | None = None
    why = ""
    for attempt in range(tries):
        if cancelled():
            return _finish(version, record, Outcome.ABORTED, "cancelled", target=target, instruction=instruction,
                           attempt_id=attempt_id)  # fmt: skip
        on_phase("relocalize")
        seen = io.perceive(target, destination)
        if seen is None or len(seen.target) < 3:
            record.add("relocalize", False, note=f"{target} not found (try {attempt + 1}/{tries})")
            why = f"{target} not found"
            continue
        obstacles = seen.obstacles
        support = None if seen.support_z is None else _r(seen.support_z)
        record.add("relocalize", True, measured={"target_center": _r(seen.target.mean(axis=0)),
                                                 "points": len(seen.target), "support_z": support})  # fmt: skip
        candidates = grasp_candidates(seen.target, version, seen.support_z, seen.obstacles)
        record.add("grasp_candidates", bool(candidates), measured={"count": len(candidates)})
        for candidate in candidates:
            last = candidate
            ok, why = _grasp_and_carry(version, io, record, candidate, seen, on_phase=on_phase)
            if ok:
                message = "holding at the stand-off pose: resume the instruction"
                return _finish(version, record, Outcome.RESUME, message, target=target, instruction=instruction,
                               attempt_id=attempt_id)  # fmt: skip
    if cancelled():
        return _finish(version, record, Outcome.ABORTED, "cancelled", target=target, instruction=instruction,
                       attempt_id=attempt_id)  # fmt: skip
    # Fallback (Algorithm 2): pre-grasp of the last candidate, else the pre-failure pose; open; resume anyway.
    on_phase("fallback")
    fallback = last.pre_grasp if last is not None else pre_failure
    rotation = last.rotation if last is not None else DOWN
    moved, blocked = io.move(transit(io.tool_position(), fallback, obstacles), rotation, OPEN)
    width = io.set_gripper(OPEN)
    record.add("fallback", moved, planned={"tool": _r(fallback)}, measured={"tool": _r(io.tool_position()),
               "gripper_width_m": _r(width)}, note=blocked)  # fmt: skip
    message = f"recovery failed ({why or 'no grasp candidate'}); at the fallback pose, resuming anyway"
    return _finish(version, record, Outcome.RESUME_UNVERIFIED, message, target=target, instruction=instruction,
                   attempt_id=attempt_id)  # fmt: skip


def _holding(version: SkillVersion, width: float) -> bool:
    return version.value("holding_min_width_m") < width < version.value("holding_max_width_m")


def _grasp_and_carry(
    version: SkillVersion,
    io: RecoveryIO,
    record: RunRecord,
    c: Candidate,
    seen: Seen,
    *,
    on_phase: Callable[[str], None],
) -> tuple[bool, str]:
    on_phase("approach")
    path = transit(io.tool_position(), c.pre_grasp, seen.obstacles)
    ok, why = io.move(path, c.rotation, OPEN)
    io.set_gripper(OPEN)
    if not record.add("approach", ok, planned={"pre_grasp": _r(c.pre_grasp)},
                      measured={"tool": _r(io.tool_position())}, note=why):  # fmt: skip
        return False, f"approach: {why}"
    on_phase("grasp")
    ok, why = io.move(_line(c.pre_grasp, c.grasp, 0.005), c.rotation, OPEN)
    width = io.set_gripper(CLOSED)
    record.add("grasp", ok, planned={"tcp": _r(c.grasp), "kind": c.kind},
               measured={"tcp": _r(io.tool_position()), "gripper_width_m": _r(width)}, note=why)  # fmt: skip
    if not ok:
        return False, f"descent: {why}"
    on_phase("lift")
    lifted = c.grasp + np.array([0.0, 0.0, version.value("lift_height_m")])
    ok, why = io.move(_line(io.tool_position(), lifted), c.rotation, CLOSED)
    record.add("lift", ok, planned={"tcp": _r(lifted)}, measured={"tcp": _r(io.tool_position())}, note=why)
    on_phase("check_holding")
    width = io.set_gripper(CLOSED)
    if not record.add("check_holding", _holding(version, width), measured={"gripper_width_m": _r(width)}):
        return False, f"not holding after the lift (width {width:.4f} m)"
    if seen.destination is not None and len(seen.destination):
        on_phase("transport")
        dest = seen.destination.mean(axis=0)
        standoff = np.array([dest[0], dest[1], float(seen.destination[:, 2].max()) + version.value("standoff_m")])
        carried = float(seen.target[:, 2].max() - seen.target[:, 2].min())  # it hangs below the fingers
        path = transit(io.tool_position(), standoff, seen.obstacles, margin_m=TRANSIT_MARGIN_M + carried)
        ok, why = io.move(path, c.rotation, CLOSED)
        record.add("transport_standoff", ok, planned={"tcp": _r(standoff)}, measured={"tcp": _r(io.tool_position())},
                   note=why)  # fmt: skip
        if not ok:
            return False, f"transport: {why}"
        width = io.set_gripper(CLOSED)
        if not record.add("check_holding", _holding(version, width), measured={"gripper_width_m": _r(width)}):
            return False, f"dropped during transport (width {width:.4f} m)"
    return True, ""


def _finish(
    version: SkillVersion, record: RunRecord, outcome: Outcome, message: str, *, target: str, instruction: str,
    attempt_id: str,
) -> SkillResult:  # fmt: skip
    label = {Outcome.RESUME: "resumed", Outcome.RESUME_UNVERIFIED: "fallback"}.get(outcome, "aborted")
    attempt = Attempt(
        attempt_id=attempt_id, skill=version.skill, version=version.version, instruction=instruction, target=target,
        outcome=label, task_completed=False, operations=record.operations,
    )  # fmt: skip
    return SkillResult(outcome, message, attempt)
