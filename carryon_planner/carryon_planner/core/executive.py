"""The executive: runs a validated plan's subtask DAG (paper §3.1, appendix A).

* Subtasks whose dependencies all succeeded start; the arm runs one physical subtask at
  a time (in plan order among those ready), `say` subtasks run whenever ready.
* A failed subtask fails its dependents (CANCELLED, with the reason).
* A subtask with a condition runs only when the observations so far make it true; a
  condition that is false SKIPS it (and its dependents are skipped too).
* An observe subtask's report that adds to or contradicts scene memory (objects the plan
  moves aside) ends the run with `replan` set: the planner must replan with the
  observation (and a mandatory update_scene) before anything else moves.
* Physical VLA subtasks go through `run_vla`: policy + judge + recovery with resume.

Everything the executive talks to is injected (`Dispatch`), so it runs the same against
ROS clients, the in-process simulator, or test fakes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from carryon_planner.core.plan import CONDITION, PRESENCE, Plan, PlannedSubtask


class State(enum.IntEnum):
    """Mirrors SubtaskState.STATE_*."""

    PENDING = 0
    ACTIVE = 1
    RECOVERING = 2
    SUCCEEDED = 3
    FAILED = 4
    SKIPPED = 5
    CANCELLED = 6


DONE = {State.SUCCEEDED, State.FAILED, State.SKIPPED, State.CANCELLED}


@dataclass(frozen=True)
class Report:
    """How one subtask ended. revealed: for observe subtasks, location -> items seen."""

    succeeded: bool
    message: str
    revealed: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class Dispatch(Protocol):
    """The execution loop as the executive sees it (one call per subtask, blocking)."""

    def run_vla(self, subtask: PlannedSubtask, permitted: tuple[str, ...] = ()) -> Report:
        """`permitted`: objects the subtask may touch besides its target, source support and
        destination (what a cover being lifted hides: `hidden_under`)."""

    def observe(self, subtask: PlannedSubtask) -> Report: ...

    def say(self, subtask: PlannedSubtask) -> Report: ...

    def control(self, subtask: PlannedSubtask) -> Report: ...


@dataclass
class SubtaskRecord:
    subtask: PlannedSubtask
    state: State = State.PENDING
    message: str = ""
    attempts: int = 0


@dataclass(frozen=True)
class RunResult:
    """succeeded: every subtask succeeded or was skipped by its condition. replan: the
    observations that differ from scene memory (non-empty = ask the planner again)."""

    succeeded: bool
    records: tuple[SubtaskRecord, ...]
    replan: Mapping[str, tuple[str, ...]]
    message: str


def condition_holds(
    condition: str, seen: Mapping[str, tuple[str, ...]], believed: Mapping[str, tuple[str, ...]] | None = None
) -> bool | None:
    """Whether `condition` holds in the observations `seen` (location -> items, items like
    "carrot under pink_cover"); None when the observations cannot tell. A relation ("carrot
    under pink_cover", "carrot at kitchen_counter") is read in `believed` (default `seen`):
    the observations with what the covers seen hide (`with_hidden`); presence ("carrot
    present", "visible", "absent") only in what was seen."""
    text = condition.strip().lower()
    if not text:
        return True
    items = [i.lower() for entries in seen.values() for i in entries]
    match = CONDITION.match(text)
    if match:
        seen = seen if believed is None else believed
        items = [i.lower() for entries in seen.values() for i in entries]
        subject, relation, host = match.groups()
        if host in seen:  # "carrot at kitchen_counter": is it among that location's items?
            return any(i.split()[0] == subject for i in seen[host])
        if any(i == f"{subject} {relation} {host}" for i in items):
            return True
        return False if any(i.split()[0] in (subject, host) for i in items) else None
    match = PRESENCE.match(text)
    if match:
        subject, word = match.groups()
        present = any(i.split()[0] == subject for i in items)
        if not items:
            return None
        return present if word in ("present", "visible") else not present
    return None


def _subject(item: str) -> str:
    words = item.lower().split()
    return words[0] if words else ""


def hidden_under(scene: Mapping[str, tuple[str, ...]], target: str) -> tuple[str, ...]:
    """What scene memory says lies under `target` ("carrot under pink_cover"): the objects a
    subtask lifting that cover off may touch (docs/shield.md, "What a subtask may touch")."""
    out: list[str] = []
    for items in scene.values():
        for item in items:
            words = item.lower().split()
            if target and len(words) == 3 and words[1] == "under" and words[2] == target.lower():
                out.append(item.split()[0])
    return tuple(sorted(set(out)))


def with_hidden(
    observations: Mapping[str, Sequence[str]], scene: Mapping[str, Sequence[str]]
) -> dict[str, tuple[str, ...]]:
    """`observations` completed with what a cover hides: scene memory's "carrot under
    pink_cover" at a location an observation saw the pink cover at (and the carrot nowhere)
    is kept, since a camera cannot see under a cover; nothing else is carried over (an
    object seen elsewhere, a cover no longer there, or one the observation itself says
    what is under: "cheese under pink_cover", is what the observation says)."""
    seen_anywhere = {_subject(i) for items in observations.values() for i in items}
    completed = {}
    for location, items in observations.items():
        seen = {_subject(i) for i in items}
        told = {w[2] for i in items if len(w := i.lower().split()) == 3 and w[1] == "under"}  # what it saw under
        hidden = []
        for item in scene.get(location, ()):
            words = item.lower().split()
            if (
                len(words) == 3
                and words[1] == "under"
                and words[2] in seen
                and words[2] not in told
                and words[0] not in seen_anywhere
            ):
                hidden.append(item)
        completed[location] = (*items, *hidden)
    return completed


def differs_from_memory(
    revealed: Mapping[str, tuple[str, ...]],
    memory: Mapping[str, tuple[str, ...]],
    acted_on: frozenset[str] = frozenset(),
) -> dict[str, tuple[str, ...]]:
    """The observed locations that contradict scene memory: an object seen that memory does
    not place there (newly revealed), or one memory places there that is not seen and
    cannot be hidden ("carrot under pink_cover" while the cover is seen). Objects the plan
    itself acts on (`acted_on`: targets, destinations) are expected to move and are
    ignored."""
    out: dict[str, tuple[str, ...]] = {}
    for location, items in revealed.items():
        seen = {_subject(i) for i in items}
        remembered = memory.get(location, ())
        known = {_subject(i) for i in remembered}
        new = seen - known - acted_on
        missing = set()
        for item in remembered:
            name, words = _subject(item), item.lower().split()
            hidden = len(words) == 3 and words[1] == "under" and words[2] in seen
            if name not in seen and name not in acted_on and not hidden:
                missing.add(name)
        if new or missing:
            out[location] = items
    return out


class Executive:
    """Runs one plan. `scene`: scene memory (location -> items) when the plan was made;
    `on_change(records)` is called whenever a subtask changes state (feedback, PlanState)."""

    def __init__(
        self,
        plan: Plan,
        dispatch: Dispatch,
        scene: Mapping[str, tuple[str, ...]],
        on_change: Callable[[Sequence[SubtaskRecord]], None] = lambda _records: None,
    ) -> None:
        self.plan = plan
        self.dispatch = dispatch
        self.scene = dict(scene)
        self.on_change = on_change
        self.records = {s.id: SubtaskRecord(s) for s in plan.subtasks}
        self.seen: dict[str, tuple[str, ...]] = {}
        self.cancelled = False
        self.acted_on = frozenset(
            name.lower() for s in plan.subtasks if s.kind == "vla" for name in (s.target, s.destination) if name
        )

    def cancel(self) -> None:
        """Stop before the next subtask (the one running finishes or is cancelled by its dispatcher)."""
        self.cancelled = True

    def _set(self, record: SubtaskRecord, state: State, message: str) -> None:
        record.state, record.message = state, message
        self.on_change(tuple(self.records.values()))

    def _ready(self) -> list[SubtaskRecord]:
        ready = []
        for record in self.records.values():
            if record.state != State.PENDING:
                continue
            deps = [self.records[d] for d in record.subtask.depends_on]
            if all(d.state in (State.SUCCEEDED,) for d in deps):
                ready.append(record)
        return ready

    def _close_unreachable(self) -> None:
        """Dependents of failed / skipped / cancelled subtasks can never run."""
        changed = True
        while changed:
            changed = False
            for record in self.records.values():
                if record.state != State.PENDING:
                    continue
                for dep in (self.records[d] for d in record.subtask.depends_on):
                    if dep.state in (State.FAILED, State.CANCELLED):
                        self._set(record, State.CANCELLED, f"{dep.subtask.id} did not succeed")
                        changed = True
                        break
                    if dep.state == State.SKIPPED:
                        self._set(record, State.SKIPPED, f"{dep.subtask.id} was skipped")
                        changed = True
                        break

    def run(self) -> RunResult:
        while True:
            self._close_unreachable()
            ready = self._ready()
            if self.cancelled:
                for record in self.records.values():
                    if record.state == State.PENDING:
                        self._set(record, State.CANCELLED, "plan cancelled")
                return self._result("cancelled", {})
            if not ready:
                return self._result("", {})
            record = ready[0]  # plan order: one subtask at a time on one arm
            subtask = record.subtask
            holds = condition_holds(subtask.condition, self.seen, with_hidden(self.seen, self.scene))
            if holds is False:
                self._set(record, State.SKIPPED, f"condition '{subtask.condition}' does not hold")
                continue
            if holds is None:
                self._set(record, State.FAILED, f"condition '{subtask.condition}' cannot be decided: nothing observed")
                continue
            record.attempts += 1
            self._set(record, State.ACTIVE, "running")
            report = self._dispatch(subtask)
            if report.revealed:
                self.seen.update(report.revealed)
            self._set(record, State.SUCCEEDED if report.succeeded else State.FAILED, report.message)
            changed = differs_from_memory(report.revealed, self.scene, self.acted_on)
            if changed:
                for other in self.records.values():
                    if other.state == State.PENDING:
                        self._set(other, State.CANCELLED, "replanning with what was observed")
                where = ", ".join(sorted(changed))
                return self._result(f"observed something new at {where}: replan", changed)

    def _dispatch(self, subtask: PlannedSubtask) -> Report:
        if subtask.kind == "vla":
            return self.dispatch.run_vla(subtask, hidden_under(self.scene, subtask.target))
        if subtask.kind == "observe":
            return self.dispatch.observe(subtask)
        if subtask.kind == "say":
            return self.dispatch.say(subtask)
        return self.dispatch.control(subtask)

    def _result(self, message: str, replan: Mapping[str, tuple[str, ...]]) -> RunResult:
        records = tuple(self.records.values())
        ok = all(r.state in (State.SUCCEEDED, State.SKIPPED) for r in records) and not replan
        if not message:
            failed = [r for r in records if r.state == State.FAILED]
            message = "done" if ok else "; ".join(f"{r.subtask.id} failed: {r.message}" for r in failed) or "stopped"
        return RunResult(ok, records, dict(replan), message)


# -- one VLA subtask: policy + judge + recovery, resume with the remaining budget ----------
class Verdict(enum.Enum):
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    UNABLE = "unable"


class VlaPlant(Protocol):
    """The pieces `run_vla` drives (ROS action/service clients, or fakes)."""

    def set_task(self, subtask: PlannedSubtask, permitted: tuple[str, ...] = ()) -> None:
        """Tell the shield (and the judge) what the subtask's target, source and destination are,
        and what else it may touch (`permitted`)."""

    def start_policy(self, subtask: PlannedSubtask, budget: int) -> None:
        """Start RunPolicy with this step budget (returns at once)."""

    def policy_steps(self) -> tuple[int, bool]:
        """(steps executed by the current run, whether the run has ended)."""

    def suspend_policy(self) -> int:
        """Cancel the current run; returns the steps it executed."""

    def verdict(self, subtask: PlannedSubtask) -> tuple[Verdict, str]:
        """The judge's current verdict and reason (blocks at most one monitor period)."""

    def recover(self, subtask: PlannedSubtask) -> tuple[bool, str]:
        """Run a recovery skill; (resume?, message)."""


def run_vla(
    subtask: PlannedSubtask,
    plant: VlaPlant,
    *,
    budget: int,
    max_recoveries: int,
    permitted: tuple[str, ...] = (),
) -> Report:
    """The execution loop for one VLA subtask: run the policy while the judge watches; on
    success stop; on failure suspend, recover, and resume the original instruction with the
    remaining budget, at most `max_recoveries` times. When the budget is spent, the last
    verdict decides (running = failed: it did not finish in time)."""
    plant.set_task(subtask, permitted)
    remaining = budget
    recoveries = 0
    plant.start_policy(subtask, remaining)
    while True:
        verdict, reason = plant.verdict(subtask)
        steps, ended = plant.policy_steps()
        if verdict == Verdict.SUCCESS:
            if not ended:
                plant.suspend_policy()
            return Report(True, f"judge: {reason}")
        if verdict == Verdict.FAILED or ended:
            used = steps if ended else plant.suspend_policy()
            remaining -= used
            why = reason if verdict == Verdict.FAILED else f"budget spent while the judge said {verdict.value}"
            if recoveries >= max_recoveries or remaining <= 0:
                return Report(False, f"{why} (after {recoveries} recovery attempt(s), {remaining} steps left)")
            recoveries += 1
            resume, message = plant.recover(subtask)
            if not resume:
                return Report(False, f"{why}; recovery gave up: {message}")
            plant.start_policy(subtask, remaining)
