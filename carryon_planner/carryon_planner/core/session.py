"""One planner request around the executive: Ask (plan only) and the Assist session.

Planning (both): the user's context from memory, the skill library and the endpoints go
to the LLM; its plan is validated and handed back for repair up to `max_repairs` times,
else refused safely (`RequestPlanner`).

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
from dataclasses import dataclass, field

from carryon_common.core.errors import CarryOnError
from carryon_common.core.llm import LlmClient
from carryon_common.core.skills import SkillLibrary
from carryon_planner.core.assist import AssistResult, assist
from carryon_planner.core.choose import relevant_to
from carryon_planner.core.constraints import rules_out_of
from carryon_planner.core.context import Endpoint, LibraryEntry, build_messages, described_images
from carryon_planner.core.executive import Dispatch, State, SubtaskRecord, with_hidden
from carryon_planner.core.facts import planning_facts, preference_texts, scene_and_library_objects
from carryon_planner.core.knowledge import FoodKnowledge, confirmations_from
from carryon_planner.core.learned_kinds import LearnedKinds
from carryon_planner.core.memory_ops import (
    ContextUnavailable,
    FactGuard,
    Memory,
    MemoryContext,
    apply_plan_memory,
    record_move,
    remember_summary,
)
from carryon_planner.core.plan import Plan, PlannedSubtask
from carryon_planner.core.protected import fact_guard
from carryon_planner.core.repair import PlanningOutcome, plan_with_repair
from carryon_planner.core.taxonomy import Taxonomy
from carryon_planner.core.validator import Validator
from carryon_planner.core.wishes import stated_wish

Log = Callable[[str], None]


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
class RequestPlanner:
    """Plans one request with the user's memory: context builder, validator, repair loop."""

    llm: LlmClient
    library: SkillLibrary
    preferences: Taxonomy
    max_repairs: int
    validator: Validator = field(default_factory=Validator)
    learned: LearnedKinds | None = None  # names the taxonomy does not know, asked of the LLM (None: not asked)
    knowledge: FoodKnowledge | None = None  # the curated food knowledge (None: the taxonomy alone decides)
    images: bool = False  # send the user's reference images (else each is named with its description)
    steps: bool = False  # the LLM answers with step plans (core/steps.py), not full plans

    def plan(
        self,
        user_id: str,
        text: str,
        context: MemoryContext,
        observations: Mapping[str, Sequence[str]] | None = None,
    ) -> PlanningOutcome:
        """A valid plan or a safe refusal for `text`; `observations` (location -> items
        seen) are what execution revealed, for a replan."""
        seen = with_hidden(observations or {}, context.scene)  # a camera cannot see under a cover
        rules, notes = self.preferences, []
        if self.learned is not None and context.facts:  # only a user with facts can have something ruled out
            notes = self.learned.learn(self.llm, scene_and_library_objects(context.scene, self.library), rules)
            rules = self.learned.taxonomy(rules)
        facts = planning_facts(
            request=text,
            scene=context.scene,
            library=self.library,
            user_facts=[f.value for f in context.facts],
            foreign_facts=context.foreign_values,
            other_users=[u for u in context.other_users if u != user_id],
            pending_observations=seen,
            preference_rules=rules,
            preferences=preference_texts((f.entity, f.key, f.value) for f in context.facts),
            knowledge=self.knowledge,
            confirmations=confirmations_from(
                ((f.entity, f.key, f.value) for f in context.facts), self.knowledge, user_id
            ),
        )
        relevant = relevant_to(self.llm, text, context.facts, sorted(facts.objects))
        wish = stated_wish(
            text,
            ((f.entity, f.key, f.value) for f in context.facts),
            instructions=self.library.instructions,
            names=sorted(facts.objects),
            locations=context.scene,
            taxonomy=rules,
            other_users=facts.other_users,
        )
        facts = dataclasses.replace(facts, remembered=tuple(r.remembered() for r in relevant), wish=wish)
        messages = build_messages(
            request=text,
            user_id=user_id,
            memory=context.rendered,
            endpoints=[Endpoint(name) for name in sorted(context.scene)],
            library=[LibraryEntry(s.instruction, s.description) for s in self.library.vla],
            observations=seen,
            images=context.images if self.images else (),
            described=described_images(context.facts) if not self.images else (),
            ruled_out={name: why for name, why in facts.ruled_out.items() if name in facts.objects},
            steps=self.steps,
            relevant=relevant,
        )
        outcome = plan_with_repair(
            self.llm, messages, facts, max_repairs=self.max_repairs, validator=self.validator, steps=self.steps
        )
        return dataclasses.replace(outcome, notes=(*notes, *outcome.notes)) if notes else outcome

    def rules_out(self, text: str) -> set[str]:
        """What a fact's text rules out: kinds and words (core/constraints.py)."""
        return rules_out_of(text, self.preferences, self.knowledge)

    def fact_guard(self, context: MemoryContext, request: str | None, who: str) -> FactGuard:
        """`who`'s writes: an allergy or a diet weakened only as `request` says (core/protected.py)."""
        return fact_guard([(f.entity, f.key, f.value) for f in context.facts], self.rules_out, request, who)


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
    "AssistSession",
    "Cancelled",
    "DispatchHooks",
    "Phase",
    "Progress",
    "RequestPlanner",
    "SessionResult",
    "Status",
]
