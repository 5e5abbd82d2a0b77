"""One planner request around the executive: Ask (plan only) and the Assist session.

Planning (both): the user's context from memory, the skill library and the endpoints go
to the LLM; its plan is validated and handed back for repair up to `max_repairs` times,
else refused safely (`RequestPlanner`, core/request_planner.py).

Ask (`ask`, planner_node's Ask service): plan one request and write what the plan
remembers (its durable user facts, its immediate scene updates); nothing moves.

Assist (`AssistSession.run`): plan, write the plan's memory operations, run the plan with
the executive (core/assist.py, core/executive.py), replan when an observation contradicts
scene memory, record where moved targets are, and finally let the summariser store
lasting facts (core/memory_ops.py). Every change of the request's progress goes to
`publish` (planner_node turns it into PlanState and Assist feedback).

Everything outside is injected: the LLM, memory (`Memory`), the dispatcher (built per
request by `make_dispatch` with the session's hooks), cancellation, publishing and the
log. Nothing here knows ROS.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from carryon_common.core.errors import CarryOnError
from carryon_planner.core.assist import AssistResult, assist
from carryon_planner.core.executive import Dispatch, State, SubtaskRecord
from carryon_planner.core.memory_ops import (
    ContextUnavailable,
    Memory,
    MemoryContext,
    apply_plan_memory,
    record_move,
    remember_summary,
)
from carryon_planner.core.plan import Plan, PlannedSubtask
from carryon_planner.core.repair import PlanningOutcome
from carryon_planner.core.request_planner import RequestPlanner  # the planning step

Log = Callable[[str], None]


@dataclass(frozen=True)
class AskAnswer:
    """Ask's answer: the plan's id, the planning outcome and notes (LLM rounds, memory
    writes, dispatch)."""

    plan_id: str
    outcome: PlanningOutcome
    notes: tuple[str, ...]


def ask(
    planner: RequestPlanner,
    memory: Memory,
    *,
    user_id: str,
    text: str,
    new_plan_id: Callable[[], str],
    plan_only: bool,
) -> AskAnswer:
    """Plan `text` for `user_id`. Unless `plan_only`, a valid plan's durable user facts and
    immediate scene updates are written; nothing moves. Raises ContextUnavailable (then no
    plan id is taken)."""
    context = memory.context(user_id)
    outcome = planner.plan(user_id, text, context)
    plan_id = new_plan_id()
    notes = [f"{len(outcome.attempts)} LLM round(s)", *(f"mended: {f}" for a in outcome.attempts for f in a.mended)]
    notes += [*outcome.notes, *outcome.left_out_lines()]
    if not outcome.refused and not plan_only:
        notes += apply_plan_memory(
            memory, user_id, outcome.plan, plan_id, guard=planner.fact_guard(context, text, "the plan")
        )
    if not outcome.refused:
        notes.append(
            "plan only: nothing dispatched"
            if plan_only
            else "not dispatched: Ask only plans (use the Assist action to carry it out)"
        )
    return AskAnswer(plan_id, outcome, tuple(notes))


class Cancelled(CarryOnError):
    """The operator cancelled the request (raised while waiting; ends it as CANCELLED)."""


class Phase(enum.IntEnum):
    """Mirrors PlanState.STATE_*."""

    PLANNING = 0
    VALIDATING = 1
    EXECUTING = 2
    SUCCEEDED = 3
    FAILED = 4
    REFUSED = 5
    CANCELLED = 6


class Status(enum.IntEnum):
    """Mirrors Assist.Result.STATUS_*."""

    SUCCEEDED = 0
    FAILED = 1
    REFUSED = 2
    CANCELLED = 3


_FINAL = {Status.SUCCEEDED: Phase.SUCCEEDED, Status.REFUSED: Phase.REFUSED, Status.CANCELLED: Phase.CANCELLED}


@dataclass(frozen=True)
class Progress:
    """A request's progress as published (a snapshot: its records are copies).
    recovering: subtask id -> why a recovery runs."""

    phase: Phase
    message: str
    reply: str
    plan_json: str
    records: tuple[SubtaskRecord, ...]
    recovering: Mapping[str, str]

    @property
    def active_subtask_id(self) -> str:
        active = [r.subtask.id for r in self.records if r.state == State.ACTIVE]
        return active[0] if active else ""


@dataclass(frozen=True)
class SessionResult:
    status: Status
    message: str
    reply: str
    progress: Progress


@dataclass(frozen=True)
class DispatchHooks:
    """What the dispatcher reports back to the session: `say` sentences, recovery
    start/end (subtask id, active, why), and VLA subtasks the judge called a success."""

    on_say: Callable[[str], None]
    on_recovering: Callable[[str, bool, str], None]
    on_succeeded: Callable[[PlannedSubtask], None]


class AssistSession:
    """One Assist request (see the module docstring). `planner` None: planning is
    unavailable (`unavailable` says why) and the request fails at once. `summarise`: run
    the summariser after a finished plan; `log` / `warn`: the node's log."""

    def __init__(
        self,
        *,
        planner: RequestPlanner | None,
        memory: Memory,
        make_dispatch: Callable[[DispatchHooks], Dispatch],
        plan_id: str,
        user_id: str,
        text: str,
        max_replans: int,
        summarise: bool,
        cancelled: Callable[[], bool],
        publish: Callable[[Progress], None],
        log: Log = lambda _line: None,
        warn: Log = lambda _line: None,
        unavailable: str = "",
    ) -> None:
        self.planner, self.memory, self.make_dispatch = planner, memory, make_dispatch
        self.plan_id, self.user_id, self.text = plan_id, user_id, text
        self.max_replans, self.summarise = max_replans, summarise
        self.cancelled, self._publish, self.log, self.warn = cancelled, publish, log, warn
        self.unavailable = unavailable
        self._lock = threading.Lock()
        self._phase = Phase.PLANNING
        self._message = ""
        self._reply = ""
        self._plan_json = ""
        self._records: list[SubtaskRecord] = []
        self._recovering: dict[str, str] = {}
        self._contexts: list[MemoryContext] = []

    # -- progress ------------------------------------------------------------------------
    def publish(self, phase: Phase | None = None, message: str | None = None) -> Progress:
        with self._lock:
            if phase is not None:
                self._phase = phase
            if message is not None:
                self._message = message
            records = tuple(dataclasses.replace(r) for r in self._records)  # the executive mutates its own
            progress = Progress(
                self._phase, self._message, self._reply, self._plan_json, records, dict(self._recovering)
            )
        self._publish(progress)
        return progress

    def _finish(self, status: Status, message: str, reply: str) -> SessionResult:
        progress = self.publish(_FINAL.get(status, Phase.FAILED), message)
        self.log(f"{self.plan_id} ({self.user_id}: {self.text!r}) ended: {message}")
        return SessionResult(status, message, reply, progress)

    # -- the request -----------------------------------------------------------------------
    def run(self) -> SessionResult:
        """Carry the request out; never raises for Cancelled or an unavailable context."""
        if self.planner is None:
            return self._finish(Status.FAILED, f"planning unavailable: {self.unavailable}", "")
        self.log(f"{self.plan_id}: {self.user_id} asks {self.text!r}")
        dispatch = self.make_dispatch(DispatchHooks(self._on_say, self._on_recovering, self._on_succeeded))
        try:
            outcome = assist(
                self._plan, self._apply_memory, dispatch, max_replans=self.max_replans, on_change=self._on_change
            )
        except Cancelled as exc:
            return self._finish(Status.CANCELLED, str(exc), self._reply)
        except ContextUnavailable as exc:
            return self._finish(Status.FAILED, exc.message, self._reply)
        if self.cancelled():
            return self._finish(Status.CANCELLED, f"cancelled by the operator ({outcome.message})", outcome.reply)
        if outcome.refused:
            return self._finish(Status.REFUSED, outcome.message, outcome.reply)
        summary = self._summarise(outcome)
        message = outcome.message + (f"; {summary}" if summary else "")
        return self._finish(Status.SUCCEEDED if outcome.succeeded else Status.FAILED, message, outcome.reply)

    def _check_cancelled(self) -> None:
        if self.cancelled():
            raise Cancelled("cancelled by the operator")

    def _plan(self, observations: Mapping[str, tuple[str, ...]]) -> PlanningOutcome:
        self._check_cancelled()
        self.publish(Phase.PLANNING, "planning" + (" again with what was observed" if observations else ""))
        context = self.memory.context(self.user_id)
        self._contexts.append(context)
        assert self.planner is not None
        outcome = self.planner.plan(self.user_id, self.text, context, observations)
        with self._lock:
            self._reply = outcome.plan.reply
            self._plan_json = json.dumps(outcome.plan.model_dump(mode="json"), sort_keys=True)
            self._records = [SubtaskRecord(s) for s in outcome.plan.subtasks]
        rounds = len(outcome.attempts)
        for note in outcome.notes:
            self.log(f"{self.plan_id}: {note}")
        rejected = [
            line
            for number, attempt in enumerate(outcome.attempts, 1)
            for line in (
                *(f"LLM round {number} mended by the planner: {fix}" for fix in attempt.mended),
                *([f"LLM round {number} rejected: {attempt.rejected_because}"] if attempt.rejected_because else []),
            )
        ]
        said = [*rejected, *outcome.left_out_lines()]  # what was left out, also when the LLM never proposed it
        for line in said:
            self.log(f"{self.plan_id}: {line}")
        if said:
            self.publish(Phase.VALIDATING, "validator: " + "; ".join(said))
        if outcome.refused:
            self.log(f"{self.plan_id}: refused after {rounds} LLM round(s): {outcome.plan.refusal}")
        else:
            ids = ", ".join(f"{s.id} {s.kind} {s.instruction or s.target}" for s in outcome.plan.subtasks)
            self.log(f"{self.plan_id}: valid plan after {rounds} LLM round(s): {ids or 'reply only'}")
        self._check_cancelled()
        return outcome

    def _apply_memory(self, plan: Plan) -> Mapping[str, tuple[str, ...]]:
        guard = (
            self.planner.fact_guard(self._contexts[-1], self.text, "the plan")
            if self.planner and self._contexts
            else None
        )
        notes = apply_plan_memory(self.memory, self.user_id, plan, self.plan_id, every_scene_update=True, guard=guard)
        if notes:
            self.log(f"{self.plan_id}: " + "; ".join(notes))
        self.publish(Phase.EXECUTING, "executing")
        return self.memory.context(self.user_id).scene

    def _summarise(self, outcome: AssistResult) -> str:
        if not (self.summarise and self.planner and self._contexts and outcome.rounds):
            return ""
        return remember_summary(
            self.planner.llm,
            self.memory,
            user_id=self.user_id,
            request=self.text,
            plan=outcome.rounds[-1].outcome.plan,
            context=self._contexts[-1],
            plan_id=self.plan_id,
            warn=self.warn,
            guard=self.planner.fact_guard(self._contexts[-1], None, "the summariser"),
        )

    # -- dispatcher hooks ------------------------------------------------------------------
    def _on_change(self, changed: Sequence[SubtaskRecord]) -> None:
        with self._lock:
            self._records = list(changed)
        self.publish()

    def _on_recovering(self, subtask_id: str, active: bool, why: str) -> None:
        with self._lock:
            if active:
                self._recovering[subtask_id] = why
            else:
                self._recovering.pop(subtask_id, None)
        self.publish()

    def _on_say(self, text: str) -> None:
        self.log(f"{self.plan_id} says: {text}")

    def _on_succeeded(self, subtask: PlannedSubtask) -> None:
        scene = self._contexts[-1].scene if self._contexts else {}
        note = record_move(self.memory, subtask, scene, self.plan_id)
        if note:
            self.log(f"{self.plan_id}: {subtask.id}: {note}")


__all__ = [
    "AskAnswer",
    "AssistSession",
    "Cancelled",
    "DispatchHooks",
    "Phase",
    "Progress",
    "SessionResult",
    "Status",
    "ask",
]
