"""The judging rules (paper §F.2) over *facts* about objects.

The `geometric` and `sim_oracle` backends differ only in where the facts come from
(masks + depth vs. simulator ground truth); both decide with `decide`, so their
agreement measures perception, not two rule sets. The `vlm` backend states the same
rules in its prompt and enforces the judge-side ones (stuck timeout, already-placed
guard, no success on doubt) on the model's structured reply.

Rules:
* The subtask's structured fields (target, destination) come from the planner's
  objective and outrank the raw instruction; the instruction is parsed only when they are
  empty.
* Placement succeeds only for a *newly* achieved state: the target (not another object)
  visibly inside the destination and no longer held, which was not the case at baseline.
* A goal state already present at baseline with no new change -> running, then failed
  after the stuck timeout.
* No task-relevant progress for longer than the stuck timeout -> failed, unless the
  target is already (newly) placed: the already-placed guard.
* Observe subtasks report objects newly visible since the baseline, independently of the
  status, with scene_update_required set when anything was revealed.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from carryon_common.core.subtask import Subtask, SubtaskKind
from carryon_judge.core.types import VerdictStatus

NOT_OBJECTS = frozenset({"robot", "table", ""})


class Goal(enum.StrEnum):
    PLACE = "place"  # target into / onto destination
    UNCOVER = "uncover"  # lift a cover off what it hides ("open the pink cover")
    OBSERVE = "observe"  # look and report what is newly visible
    UNSUPPORTED = "unsupported"  # nothing the rules can check (say, control, push, ...)


@dataclass(frozen=True)
class GoalSpec:
    goal: Goal
    target: str = ""
    destination: str = ""


_PLACE = re.compile(
    r"^(?:put|place|move|drop)\s+(?:the\s+)?(?P<t>[\w ]+?)\s+(?:in|into|on|onto)\s+(?:the\s+)?(?P<d>\w[\w ]*)$"
)
_OPEN = re.compile(r"^(?:open|lift|remove|uncover)\s+(?:the\s+)?(?P<t>[\w ]+?)$")


def _name(words: str) -> str:
    return words.strip().replace(" ", "_")


def goal_of(subtask: Subtask, role_of: Callable[[str], str | None]) -> GoalSpec:
    """What the rules check for `subtask`. `role_of(name)` gives an object's role
    (item / container / support / cover / obstacle) or None when unknown."""
    if subtask.kind == SubtaskKind.OBSERVE:
        return GoalSpec(Goal.OBSERVE, subtask.target, subtask.destination)
    if subtask.kind != SubtaskKind.VLA:
        return GoalSpec(Goal.UNSUPPORTED, subtask.target, subtask.destination)
    target, destination = subtask.target, subtask.destination
    if not target:  # fall back to the instruction only when the planner left the fields empty
        text = subtask.instruction.strip().lower()
        if match := _PLACE.match(text):
            target, destination = _name(match["t"]), destination or _name(match["d"])
        elif match := _OPEN.match(text):
            target = _name(match["t"])
    if target and destination:
        return GoalSpec(Goal.PLACE, target, destination)
    if target and role_of(target) == "cover":
        return GoalSpec(Goal.UNCOVER, target)
    return GoalSpec(Goal.UNSUPPORTED, target, destination)


@dataclass(frozen=True)
class ObjectFacts:
    """What is known about one object at one instant.

    center: (x, y) metres in world; bottom_z / top_z: lowest / highest point, metres;
    held: between the gripper's closed fingers; inside: container or support it is in / on
    ("" none); hides: objects this cover hides (None = unknown, e.g. for perception).
    """

    name: str
    visible: bool
    center: npt.NDArray[np.float64]
    bottom_z: float
    top_z: float
    held: bool = False
    inside: str = ""
    hides: frozenset[str] | None = None


@dataclass(frozen=True)
class SceneFacts:
    """Facts about every object seen (or known) at one instant; `source` names the backend."""

    objects: Mapping[str, ObjectFacts]
    source: str

    def visible(self, name: str) -> ObjectFacts | None:
        facts = self.objects.get(name)
        return facts if facts is not None and facts.visible else None

    def visible_names(self) -> frozenset[str]:
        return frozenset(n for n, f in self.objects.items() if f.visible and n not in NOT_OBJECTS)


@dataclass(frozen=True)
class RuleParams:
    """stuck_timeout_s: no progress for longer -> failed (seconds); moved_m: a target
    displacement that counts as a new change (metres); rest_m: a cover resting on the
    table has its top within this of its baseline top (metres)."""

    stuck_timeout_s: float
    moved_m: float = 0.05
    rest_m: float = 0.02


@dataclass(frozen=True)
class Decision:
    status: VerdictStatus
    reason: str
    revealed: tuple[str, ...] = ()
    scene_update_required: bool = False


def _stuck(since_progress_s: float, params: RuleParams) -> bool:
    return since_progress_s >= 0.0 and since_progress_s > params.stuck_timeout_s


def _where(facts: ObjectFacts | None) -> str:
    if facts is None:
        return "not visible"
    if facts.held:
        return "held by the gripper"
    return f"in/on {facts.inside}" if facts.inside else "not in any container"


def _timeout(since_progress_s: float, params: RuleParams, reason: str) -> Decision:
    if _stuck(since_progress_s, params):
        return Decision(
            VerdictStatus.FAILED,
            f"{reason}; no task-relevant progress for {since_progress_s:.1f} s (stuck timeout "
            f"{params.stuck_timeout_s:.1f} s)",
        )
    return Decision(VerdictStatus.RUNNING, reason)


LIFTED_M = 0.01  # a destination whose bottom is this much above where it stood is lifted, metres


def _place(spec: GoalSpec, base: SceneFacts, now: SceneFacts, since: float, params: RuleParams) -> Decision:
    target, dest = spec.target, spec.destination
    cur, was = now.visible(target), base.visible(target)
    dest_now, dest_was = now.visible(dest), base.visible(dest)
    if dest_now is None:
        return _timeout(since, params, f"destination {dest} not visible; success cannot be confirmed")
    if cur is None:
        return _timeout(since, params, f"target {target} not visible; success ruled out (identity uncertain)")
    if dest_now.held or (dest_was is not None and dest_now.bottom_z - dest_was.bottom_z > LIFTED_M):
        # A bowl caught in the fingers with the carrot and lifted: "inside" it for the moment,
        # the carrot falls out (or the bowl with it) as soon as it is let go.
        return _timeout(since, params, f"destination {dest} is lifted off where it stood; success cannot be confirmed")
    placed_now = cur.inside == dest and not cur.held
    placed_before = was is not None and was.inside == dest and not was.held
    moved = was is not None and float(np.linalg.norm(cur.center - was.center)) > params.moved_m
    if placed_now and (not placed_before or moved):
        guard = " (already-placed guard: not failed despite the stuck timeout)" if _stuck(since, params) else ""
        return Decision(VerdictStatus.SUCCESS, f"{target} newly inside {dest} and released{guard}")
    if placed_now:
        return _timeout(since, params, f"{target} was already inside {dest} at baseline; no new change")
    others = sorted(
        n
        for n, f in now.objects.items()
        if f.visible and f.inside == dest and n != target and getattr(base.visible(n), "inside", "") != dest
    )
    reason = f"{target} {_where(cur)}, not yet released inside {dest}"
    if others:
        reason += f"; a different object ({', '.join(others)}) is in {dest}: not the target, no success"
    return _timeout(since, params, reason)


def _uncover(
    spec: GoalSpec, base: SceneFacts, now: SceneFacts, since: float, params: RuleParams, *, radius_m: float
) -> Decision:
    cover = spec.target
    cur, was = now.visible(cover), base.visible(cover)
    if cur is None or was is None:
        return _timeout(since, params, f"cover {cover} not visible {'now' if cur is None else 'at baseline'}")
    revealed = sorted(now.visible_names() - base.visible_names() - {cover})
    shown = f"; newly visible: {', '.join(revealed)}" if revealed else ""
    # The lid is seen from above wherever the cover stands; its walls may be hidden behind what it uncovered.
    resting = not cur.held and cur.top_z < was.top_z + params.rest_m
    if was.hides is not None and cur.hides is not None:  # ground truth: what it hides is known
        if not was.hides:
            reason = f"{cover} hid nothing at baseline: goal state already present, no new change"
            return _timeout(since, params, reason)
        if cur.hides:
            return _timeout(since, params, f"{cover} still hides {', '.join(sorted(cur.hides))}")
        if not resting:
            return _timeout(since, params, f"{cover} lifted off {', '.join(sorted(was.hides))} but not set down")
        return Decision(VerdictStatus.SUCCESS, f"{cover} set down off {', '.join(sorted(was.hides))}{shown}")
    moved = float(np.linalg.norm(cur.center - was.center))
    if moved < radius_m:
        return _timeout(since, params, f"{cover} moved {100 * moved:.0f} cm of the {100 * radius_m:.0f} needed{shown}")
    if not resting:
        return _timeout(since, params, f"{cover} moved {100 * moved:.0f} cm but is not set down")
    return Decision(VerdictStatus.SUCCESS, f"{cover} moved {100 * moved:.0f} cm off its place and set down{shown}")


def decide(
    spec: GoalSpec,
    base: SceneFacts,
    now: SceneFacts,
    since_progress_s: float,
    params: RuleParams,
    *,
    cover_radius_m: float = 0.07,
) -> Decision:
    """The verdict for one subtask from baseline and current facts (see module docstring).
    `cover_radius_m`: how far a cover must move to count as lifted off (perception)."""
    if spec.goal == Goal.OBSERVE:
        revealed = tuple(sorted(now.visible_names() - base.visible_names()))
        if revealed:
            return Decision(VerdictStatus.SUCCESS, f"observed; newly revealed: {', '.join(revealed)}", revealed, True)
        return Decision(VerdictStatus.SUCCESS, "observed; nothing newly revealed since the baseline")
    if spec.goal == Goal.PLACE:
        return _place(spec, base, now, since_progress_s, params)
    if spec.goal == Goal.UNCOVER:
        return _uncover(spec, base, now, since_progress_s, params, radius_m=cover_radius_m)
    return Decision(
        VerdictStatus.UNABLE_TO_JUDGE,
        f"no rule for this subtask (target {spec.target or '-'}, destination {spec.destination or '-'}): "
        "only placing, uncovering and observing are checked",
    )
