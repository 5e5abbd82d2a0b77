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
Grasp candidates and transit paths are core/grasp.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from scipy.spatial import cKDTree

from carryon_recovery.core.grasp import (
    DOWN,
    SLACK_M,
    TRANSIT_MARGIN_M,
    Candidate,
    FloatArray,
    grasp_candidates,
    grasp_margin,
    line,
    nudge_away,
    transit,
)
from carryon_recovery.core.library import SkillVersion
from carryon_recovery.core.reflection import Attempt, Operation
from carryon_recovery.core.types import Outcome

OPEN, CLOSED = 0.0, 1.0


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


SUPPORT_REACH_M = 0.015  # what the target rests on shows this close (xy) to one of its own points


def support_height(clouds: dict[str, FloatArray], target: str, reach_m: float = SUPPORT_REACH_M) -> float | None:
    """Height of what the target rests on: the highest of the other objects' points (the
    robot's excluded) lying under or right beside the target's own points (within `reach_m`
    xy of one) and below its lowest point (median of the top 10 %), or None when nothing is
    seen there. Beside means touching: a plate's rim 4 cm from a carrot on the table is not
    what it rests on."""
    points = clouds[target]
    tree = cKDTree(points[:, :2])
    bottom = float(points[:, 2].min())
    below = []
    for name, cloud in clouds.items():
        if name in (target, "robot") or not len(cloud):
            continue
        under = cloud[cloud[:, 2] < bottom]
        if len(under):
            near = np.asarray(tree.query(under[:, :2], distance_upper_bound=reach_m)[0]) <= reach_m
            if near.any():
                below.append(under[near, 2])
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
        points,
        clouds.get(destination) if destination else None,
        support_height(clouds, target),
        np.vstack(others) if others else None,
    )


@dataclass
class RunRecord:
    operations: list[Operation] = field(default_factory=list)

    def add(
        self,
        op: str,
        ok: bool,
        planned: dict[str, object] | None = None,
        measured: dict[str, object] | None = None,
        note: str = "",
    ) -> bool:
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
            return _finish(
                version,
                record,
                Outcome.ABORTED,
                "cancelled",
                target=target,
                instruction=instruction,
                attempt_id=attempt_id,
            )
        on_phase("relocalize")
        seen = io.perceive(target, destination)
        if seen is None or len(seen.target) < 3:
            record.add("relocalize", False, note=f"{target} not found (try {attempt + 1}/{tries})")
            why = f"{target} not found"
            continue
        candidates = _relocalized(version, record, seen)

        def look_again() -> tuple[Seen, list[Candidate]] | None:
            on_phase("relocalize")
            look = io.perceive(target, destination)
            return None if look is None or len(look.target) < 3 else (look, _relocalized(version, record, look))

        if "nudge" in version.procedure and _nudge(version, io, record, seen, candidates, on_phase=on_phase):
            seen, candidates = look_again() or (seen, candidates)
        obstacles = seen.obstacles
        queue, renewed = list(candidates), False
        while queue:
            candidate = queue.pop(0)
            last = candidate
            ok, why, disturbed = _grasp_and_carry(version, io, record, candidate, seen, on_phase=on_phase)
            if disturbed and not renewed and not cancelled():
                # Lifted and lost: it lies elsewhere now, so the other candidates (made where it
                # was) would close on nothing. Look again, once per try.
                renewed = True
                seen, queue = look_again() or (seen, queue)
                obstacles = seen.obstacles
            if ok:
                message = "holding at the stand-off pose: resume the instruction"
                return _finish(
                    version,
                    record,
                    Outcome.RESUME,
                    message,
                    target=target,
                    instruction=instruction,
                    attempt_id=attempt_id,
                )
    if cancelled():
        return _finish(
            version, record, Outcome.ABORTED, "cancelled", target=target, instruction=instruction, attempt_id=attempt_id
        )
    # Fallback (Algorithm 2): pre-grasp of the last candidate, else the pre-failure pose; open; resume anyway.
    on_phase("fallback")
    fallback = last.pre_grasp if last is not None else pre_failure
    rotation = last.rotation if last is not None else DOWN
    moved, blocked = io.move(transit(io.tool_position(), fallback, obstacles), rotation, OPEN)
    width = io.set_gripper(OPEN)
    record.add(
        "fallback",
        moved,
        planned={"tool": _r(fallback)},
        measured={"tool": _r(io.tool_position()), "gripper_width_m": _r(width)},
        note=blocked,
    )
    message = f"recovery failed ({why or 'no grasp candidate'}); at the fallback pose, resuming anyway"
    return _finish(
        version,
        record,
        Outcome.RESUME_UNVERIFIED,
        message,
        target=target,
        instruction=instruction,
        attempt_id=attempt_id,
    )


def _relocalized(version: SkillVersion, record: RunRecord, seen: Seen) -> list[Candidate]:
    """Record what relocalization saw; the grasp candidates from it."""
    support = None if seen.support_z is None else _r(seen.support_z)
    record.add(
        "relocalize",
        True,
        measured={"target_center": _r(seen.target.mean(axis=0)), "points": len(seen.target), "support_z": support},
    )
    candidates = grasp_candidates(seen.target, version, seen.support_z, seen.obstacles)
    record.add("grasp_candidates", bool(candidates), measured={"count": len(candidates)})
    return candidates


def _nudge(
    version: SkillVersion,
    io: RecoveryIO,
    record: RunRecord,
    seen: Seen,
    candidates: list[Candidate],
    *,
    on_phase: Callable[[str], None],
) -> bool:
    """When every top-down grasp would put a finger within the shield's refusal distance of
    an obstacle (a carrot lying 4 cm from a plate's rim), push the object away from it
    first with the closed fingers put down in the gap (pre-grasp manipulation). True when
    the push was made (then perceive again); False when none was needed or possible."""
    top_down = [c for c in candidates if c.kind == "top_down"]
    lowest = float(seen.target[:, 2].min())
    floor = lowest if seen.support_z is None else min(seen.support_z, lowest)
    best = max((grasp_margin(c, seen.obstacles, floor) for c in top_down), default=math.inf)
    if best >= SLACK_M:
        return False
    plan = nudge_away(seen.target, seen.obstacles, floor, SLACK_M - best + 0.02, version.value("approach_offset_m"))
    if plan is None:
        record.add("nudge", False, measured={"grasp_margin_m": _r(best)}, note="no room for the hand beside it")
        return False
    on_phase("nudge")
    path = np.vstack([transit(io.tool_position(), plan.pre, seen.obstacles), line(plan.pre, plan.start, 0.005)])
    ok, why = io.move(path, plan.rotation, CLOSED)
    if ok:
        ok, why = io.move(line(plan.start, plan.end, 0.005), plan.rotation, CLOSED)
    io.move(line(io.tool_position(), plan.up), plan.rotation, CLOSED)  # up again, whatever happened
    record.add(
        "nudge",
        ok,
        planned={"start": _r(plan.start), "end": _r(plan.end)},
        measured={"grasp_margin_m": _r(best), "tool": _r(io.tool_position())},
        note=why,
    )
    return True  # even a push cut short may have moved it: look again


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
) -> tuple[bool, str, bool]:
    """Approach, grasp, lift, check, carry to the stand-off: (held at the stand-off, why
    not, whether the object was lifted and lost — it lies elsewhere now)."""
    on_phase("approach")
    path = transit(io.tool_position(), c.pre_grasp, seen.obstacles)
    ok, why = io.move(path, c.rotation, c.open_command)
    io.set_gripper(c.open_command)
    if not record.add(
        "approach", ok, planned={"pre_grasp": _r(c.pre_grasp)}, measured={"tool": _r(io.tool_position())}, note=why
    ):
        return False, f"approach: {why}", False
    on_phase("grasp")
    ok, why = io.move(line(c.pre_grasp, c.grasp, 0.005), c.rotation, c.open_command)
    width = io.set_gripper(CLOSED)
    record.add(
        "grasp",
        ok,
        planned={"tcp": _r(c.grasp), "kind": c.kind},
        measured={"tcp": _r(io.tool_position()), "gripper_width_m": _r(width)},
        note=why,
    )
    if not ok:
        return False, f"descent: {why}", False
    on_phase("lift")
    lifted = c.grasp + np.array([0.0, 0.0, version.value("lift_height_m")])
    ok, why = io.move(line(io.tool_position(), lifted), c.rotation, CLOSED)
    record.add("lift", ok, planned={"tcp": _r(lifted)}, measured={"tcp": _r(io.tool_position())}, note=why)
    on_phase("check_holding")
    width = io.set_gripper(CLOSED)
    if not record.add("check_holding", _holding(version, width), measured={"gripper_width_m": _r(width)}):
        return False, f"not holding after the lift (width {width:.4f} m)", True
    if seen.destination is not None and len(seen.destination):
        on_phase("transport")
        dest = seen.destination.mean(axis=0)
        standoff = np.array([dest[0], dest[1], float(seen.destination[:, 2].max()) + version.value("standoff_m")])
        carried = float(seen.target[:, 2].max() - seen.target[:, 2].min())  # it hangs below the fingers
        path = transit(io.tool_position(), standoff, seen.obstacles, margin_m=TRANSIT_MARGIN_M + carried)
        ok, why = io.move(path, c.rotation, CLOSED)
        record.add(
            "transport_standoff", ok, planned={"tcp": _r(standoff)}, measured={"tcp": _r(io.tool_position())}, note=why
        )
        if not ok:
            return False, f"transport: {why}", False
        width = io.set_gripper(CLOSED)
        if not record.add("check_holding", _holding(version, width), measured={"gripper_width_m": _r(width)}):
            return False, f"dropped during transport (width {width:.4f} m)", True
    return True, "", False


def _finish(
    version: SkillVersion,
    record: RunRecord,
    outcome: Outcome,
    message: str,
    *,
    target: str,
    instruction: str,
    attempt_id: str,
) -> SkillResult:
    label = {Outcome.RESUME: "resumed", Outcome.RESUME_UNVERIFIED: "fallback"}.get(outcome, "aborted")
    attempt = Attempt(
        attempt_id=attempt_id,
        skill=version.skill,
        version=version.version,
        instruction=instruction,
        target=target,
        outcome=label,
        task_completed=None,  # known once the resumed instruction ends (core/outcomes.py)
        operations=record.operations,
    )
    return SkillResult(outcome, message, attempt)
