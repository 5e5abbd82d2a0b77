"""What a subtask may touch: the one definition behind the shield's exemptions and the
simulator's contact monitor (docs/shield.md, "What a subtask may touch").

A subtask's task (SetTask: target, source, destination, permitted contacts) lets the robot,
and whatever it holds, touch

* its **target**, anywhere, in every phase (reach, grasp, lift, carry, place, push);
* its **destination**, anywhere (the target is set down in or on it);
* each **permitted contact**, anywhere;
* the target's **support**, only in a patch at the target (within `SUPPORT_MARGIN_M`
  horizontally of it, from `SUPPORT_BELOW_M` below its lowest point to `SUPPORT_ABOVE_M`
  above it), so only while the target stands on it, is lifted off it or set down on it.
  The support is the source when the source names an object, else (a place such as
  "kitchen_counter") the support surfaces (the table); and also whatever the target rests
  on now (a dropped carrot on a plate's rim: `resting_on`) or, while it is held, what it
  rested on when the grasp closed (it is being lifted off that: `SupportTracker`). A task
  without a source has no support.

Anything else is an unpermitted contact: any other object, the table away from the
target, the source once the target is lifted off it, any object the carried target hits.
Contacts between the robot and what it holds are not judged. The rules name no mover:
the robot and a carried object are held to the same set.

Who applies them: the shield exempts the target, destination and permitted contacts as a
whole and the support patch from the obstacle set (carryon_shield.core.grounding); the
simulator's contact monitor permits the same contacts, judging each contact point
(carryon_sim.core.contacts). Units: metres, world frame, z up.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

# What holds an object whose source is a place rather than an object (the shield's
# `support_labels` default; the simulator's table).
SUPPORT_SURFACES: tuple[str, ...] = ("table",)
# The support patch at the target: horizontal reach around the target's points, m (the
# shield's `source_patch_margin_m` default), and the height band relative to the target's
# lowest point, m.
SUPPORT_MARGIN_M = 0.08
SUPPORT_BELOW_M = 0.03
SUPPORT_ABOVE_M = 0.02
# The target rests on an object that it touches (or, seen by a camera, that lies just under
# it) no higher than this above its own lowest point, m; a contact higher up is a side
# contact (a bottle the carrot leans against).
RESTING_ABOVE_M = 0.01
# Where sim_node records the violations of a run of `carryon up`, in its run folder.
VIOLATIONS_FILE = "contact_violations.jsonl"


@dataclass(frozen=True)
class ContactTask:
    """What the current subtask may touch (SetTask). Names are object names, or place
    names for `source` / `destination`; "" when not given."""

    subtask_id: str = ""
    target: str = ""
    source: str = ""
    destination: str = ""
    permitted: tuple[str, ...] = ()


class Rule(enum.StrEnum):
    """Why a contact is permitted."""

    TARGET = "target"
    DESTINATION = "destination"
    PERMITTED = "permitted contact"
    SUPPORT = "support patch under the target"


def touchable(task: ContactTask) -> frozenset[str]:
    """Objects the subtask may touch anywhere, in every phase: its target, its destination
    and its permitted contacts."""
    return frozenset({task.target, task.destination, *task.permitted} - {""})


def supports(
    task: ContactTask,
    *,
    known: Container[str],
    resting_on: Callable[[], Iterable[str]] = tuple,
    surfaces: Iterable[str] = SUPPORT_SURFACES,
) -> tuple[str, ...]:
    """Objects the subtask may touch only in the support patch at its target. `known`:
    names of objects (a source not among them is a place, held by `surfaces`);
    `resting_on()`: what else the target rests on (asked only when the task has a source)."""
    whole = touchable(task)
    if not task.source or task.source in whole:
        return ()
    holders = [task.source] if task.source in known else list(surfaces)
    holders += [name for name in resting_on() if name not in holders and name not in whole]
    return tuple(holders)


@dataclass
class SupportTracker:
    """`supports` over time for one applier (the shield's grounder, the contact monitor):
    while the target is not held, what it rests on now (measured); while it is held, what
    it rested on the last time it was not (the support it is being grasped and lifted
    from: the patch band lets go of it once the target is lifted clear). A new task
    forgets."""

    task: ContactTask | None = None
    rested_on: tuple[str, ...] = ()

    def __call__(
        self,
        task: ContactTask,
        *,
        known: Container[str],
        held: bool,
        resting_on: Callable[[], Iterable[str]],
        surfaces: Iterable[str] = SUPPORT_SURFACES,
    ) -> tuple[str, ...]:
        if task != self.task:
            self.task, self.rested_on = task, ()

        def now() -> tuple[str, ...]:
            if not held:
                self.rested_on = tuple(resting_on())
            return self.rested_on

        return supports(task, known=known, resting_on=now, surfaces=surfaces)


def in_support_patch(height_m: float, horizontal_m: float, *, margin_m: float = SUPPORT_MARGIN_M) -> bool:
    """Whether a point of a support lies in the patch at the target: `height_m` above the
    target's lowest point (negative: below it), `horizontal_m` from the target's nearest
    point in the horizontal plane."""
    return -SUPPORT_BELOW_M <= height_m <= SUPPORT_ABOVE_M and horizontal_m <= margin_m


def resting_on(lowest_touch_m: Mapping[str, float], *, surfaces: Iterable[str] = SUPPORT_SURFACES) -> tuple[str, ...]:
    """What the target rests on, from where it touches each other object: name -> height
    of the lowest contact above the target's lowest point, m. An object touched no higher
    than `RESTING_ABOVE_M` holds it up; none while a support surface does (a cube standing
    on the table rests on nothing beside it)."""
    under = sorted(name for name, height in lowest_touch_m.items() if height <= RESTING_ABOVE_M)
    return () if set(under) & set(surfaces) else tuple(under)


def rule_for(task: ContactTask, touched: str, *, support: Iterable[str], in_patch: bool) -> Rule | None:
    """The rule that permits touching `touched` (None: an unpermitted contact). `support`:
    `supports(...)` now; `in_patch`: the contact point lies in the support patch."""
    if touched == task.target and touched:
        return Rule.TARGET
    if touched == task.destination and touched:
        return Rule.DESTINATION
    if touched and touched in task.permitted:
        return Rule.PERMITTED
    if in_patch and touched in tuple(support):
        return Rule.SUPPORT
    return None


@dataclass(frozen=True)
class Violation:
    """A contact the task does not permit, as the simulator's contact monitor records it.
    Times are simulation seconds; `end_s` is None while it lasts; `force_n`: the largest
    summed normal force of its unpermitted contact points at one control step, newtons."""

    start_s: float
    mover: str  # "robot" or the carried object
    touched: str
    subtask_id: str = ""
    force_n: float = 0.0
    end_s: float | None = None
    # The robot's parts that made it ("hand", "fingers" or a link of the arm, e.g.
    # "panda_link5"); empty for a carried object's contact.
    robot_parts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "robot_parts", tuple(self.robot_parts))  # JSON gives a list

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def describe(self) -> str:
        """One line: mover -> touched, when, during which subtask, how hard."""
        when = f"{self.start_s:.2f}-{self.end_s:.2f} s" if self.end_s is not None else f"{self.start_s:.2f} s (on)"
        during = f"during {self.subtask_id}" if self.subtask_id else "with no subtask set"
        mover = f"{self.mover} ({', '.join(self.robot_parts)})" if self.robot_parts else self.mover
        return f"{mover} → {self.touched} at {when} {during}, {self.force_n:.1f} N"


def read_violations(path: Path) -> list[Violation]:
    """The violations recorded in a `VIOLATIONS_FILE` (one JSON object a line), in the
    order they start; a torn last line (a process killed mid-write) is skipped."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(Violation(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return sorted(out, key=lambda v: v.start_s)
