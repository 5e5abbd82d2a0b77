"""The plan validator: every rule a named check with a message (paper appendix A, F.2).

A plan is dispatched only when no check fails; failures go back to the LLM (repair loop)
as the list of messages. Checks are deliberately conservative: they reject what is
certainly wrong (a paraphrased instruction, a name that exists nowhere, a dependency
cycle) and the cheap-to-detect forms of what the paper's prompt forbids (acting on a mere
question, another user's facts, an observation not written to scene memory).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from carryon_planner.core.answers import answer_write, unwritten
from carryon_planner.core.constraints import (
    ask_first_problems,
    asked_ruled_out,
    preference_conflict,
    standing_in,
)
from carryon_planner.core.knowledge import Confirmation
from carryon_planner.core.plan import (
    Plan,
    UpdateScene,
    UpdateUser,
    ancestors,
    condition_names,
    dependency_cycle,
)
from carryon_planner.core.requests import about_other_users, readable, request_asks_for_action, users_named
from carryon_planner.core.scene_checks import scene_problems
from carryon_planner.core.scope import scope_problems
from carryon_planner.core.usual import Remembered, problems
from carryon_planner.core.wishes import StatedWish, wish_written

ACTION_PROMISES = re.compile(r"\b(i will|i'll|let me|i am going to|i'm going to|on it)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Violation:
    """One failed check. `check` is its stable name (tests and benchmarks count them)."""

    check: str
    message: str
    subtask_id: str = ""

    def __str__(self) -> str:
        where = f" (subtask {self.subtask_id})" if self.subtask_id else ""
        return f"[{self.check}]{where} {self.message}"


@dataclass(frozen=True)
class PlanningFacts:
    """What a plan is checked against.

    instructions: the skill library's VLA instructions; control_skills: names of control
    skills; objects / locations: every name the plan may use (scene memory + library);
    user_facts: values of the active user's facts; foreign_facts: values that only other
    users' memories hold (never to appear in this user's plan); other_users: the other
    users' ids (lower case: nothing about them is written here); pending_observations:
    location -> contents revealed since the last plan, which the plan must write to scene
    memory; ruled_out: objects the user's preferences exclude (object -> preference);
    unsettled: objects (and instructions) that may break a constraint of the user's that no
    trusted source settles: never served, the user is asked (core/constraints.py);
    whereabouts: object -> its location in scene memory (for mending a plan, core/mend.py);
    skill_objects: instruction -> the objects the library declares it acts on (a step
    plan's expansion, core/steps.py); covers: object -> the cover scene memory puts it
    under (scene memory as observations since leave it); known_covers: what memory or an
    observation has something under; gone: objects memory placed at a location observed
    since, that no observation shows; stated: object -> where the request says it is now (whereabouts already says
    so); remembered: the user's facts that bear on the request (core/usual.py); wish: the
    remembered fact the request revises, and whether for good (core/wishes.py); answers:
    what the request says an object has or lacks, to be remembered (core/answers.py).
    """

    request: str
    instructions: tuple[str, ...]
    objects: frozenset[str]
    locations: frozenset[str]
    control_skills: tuple[str, ...] = ()
    user_facts: frozenset[str] = frozenset()
    foreign_facts: frozenset[str] = frozenset()
    other_users: frozenset[str] = frozenset()
    pending_observations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    ruled_out: Mapping[str, str] = field(default_factory=dict)  # name -> the preference ruling it out, and why
    unsettled: Mapping[str, str] = field(default_factory=dict)  # name -> the constraint no trusted source settles
    whereabouts: Mapping[str, str] = field(default_factory=dict)  # object -> the location scene memory puts it at
    skill_objects: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # instruction -> its declared objects
    covers: Mapping[str, str] = field(default_factory=dict)  # object -> the cover it is under
    stated: Mapping[str, str] = field(default_factory=dict)  # object -> where the request says it is now
    remembered: tuple[Remembered, ...] = ()
    known_covers: frozenset[str] = frozenset()  # names memory or an observation has something under
    gone: frozenset[str] = frozenset()  # remembered at a location looked at since, seen nowhere
    in_scene: frozenset[str] | None = None  # what scene memory or an observation mentions (None: not known)
    wish: StatedWish | None = None  # the remembered fact the request revises, and for how long
    answers: tuple[Confirmation, ...] = ()  # what the request says about objects' kinds (core/answers.py)

    @property
    def asks_for_action(self) -> bool:
        """Whether the request is an order, not only a question or a statement (core/requests.py)."""
        return request_asks_for_action(self.request, self.objects)


@dataclass(frozen=True)
class ValidationReport:
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def feedback(self) -> str:
        """The failures as a message for the LLM's repair round."""
        lines = "\n".join(f"- {v}" for v in self.violations)
        return f"The plan was rejected by these checks; answer again with a corrected plan:\n{lines}"


def _spoken(name: str) -> str:
    return name.replace("_", " ").lower()


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def mentions(text: str, name: str) -> bool:
    lowered = text.lower()
    return name.lower() in lowered or _spoken(name) in lowered


class Validator:
    """Runs every check; `validate(plan, facts)` returns all failures (not just the first)."""

    def validate(self, plan: Plan, facts: PlanningFacts) -> ValidationReport:
        violations: list[Violation] = []
        for check in (
            self._refusal,
            self._ids_and_dependencies,
            self._instructions,
            self._names,
            self._conditions,
            self._where_things_are,
            self._action_requested,
            self._reply_matches,
            self._observations_recorded,
            self._foreign_facts,
            self._other_users,
            self._preferences,
            self._ask_first,
            self._memory_and_library,
            self._acts_on_request,
            self._wish_remembered,
            self._answers_remembered,
        ):
            violations.extend(check(plan, facts))
        return ValidationReport(tuple(violations))

    # -- checks --------------------------------------------------------------------------
    def _refusal(self, plan: Plan, _facts: PlanningFacts) -> Iterable[Violation]:
        if plan.refusal is not None and plan.subtasks:
            yield Violation("refusal_without_subtasks", "a refusal must not dispatch subtasks")
        if plan.refusal is not None and not plan.refusal.strip():
            yield Violation("refusal_without_subtasks", "a refusal needs a reason")

    def _ids_and_dependencies(self, plan: Plan, _facts: PlanningFacts) -> Iterable[Violation]:
        ids = [s.id for s in plan.subtasks]
        for duplicate in sorted({i for i in ids if ids.count(i) > 1}):
            yield Violation("unique_ids", f"subtask id {duplicate!r} is used more than once", duplicate)
        known = set(ids)
        for subtask in plan.subtasks:
            for dependency in subtask.depends_on:
                if dependency not in known:
                    yield Violation("dependencies_exist", f"depends on unknown subtask {dependency!r}", subtask.id)
                elif dependency == subtask.id:
                    yield Violation("no_dependency_cycle", "depends on itself", subtask.id)
        cycle = dependency_cycle(plan.subtasks)
        if len(cycle) > 2:
            yield Violation("no_dependency_cycle", "dependency cycle " + " -> ".join(cycle))

    def _instructions(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        for subtask in plan.subtasks:
            if subtask.kind == "vla":
                if subtask.instruction not in facts.instructions:
                    close = difflib.get_close_matches(subtask.instruction, facts.instructions, n=1, cutoff=0.5)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    yield Violation(
                        "instruction_in_library",
                        f"instruction {subtask.instruction!r} is not copied verbatim from the skill library{hint}",
                        subtask.id,
                    )
            elif subtask.kind == "control" and subtask.instruction not in facts.control_skills:
                listed = ", ".join(facts.control_skills) or "none"
                yield Violation(
                    "instruction_in_library",
                    f"control skill {subtask.instruction!r} is not in the library (known: {listed})",
                    subtask.id,
                )

    def _names(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        everything = facts.objects | facts.locations
        for subtask in plan.subtasks:
            if subtask.kind == "observe":
                if subtask.target not in facts.locations:
                    yield Violation(
                        "known_names",
                        f"observe target {subtask.target!r} is not a known location "
                        f"({', '.join(sorted(facts.locations))})",
                        subtask.id,
                    )
            elif subtask.kind == "vla" and subtask.target and subtask.target not in facts.objects:
                yield Violation("known_names", f"target {subtask.target!r} is not a known object", subtask.id)
            for role, name in (("source", subtask.source), ("destination", subtask.destination)):
                if name and name not in everything:
                    yield Violation("known_names", f"{role} {name!r} is neither an object nor a location", subtask.id)
        for op in plan.memory_operations:
            if isinstance(op, UpdateScene) and op.location and op.location not in facts.locations:
                yield Violation("known_names", f"update_scene names unknown location {op.location!r}")

    def _conditions(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        by_id = {s.id: s for s in plan.subtasks}
        everything = facts.objects | facts.locations
        for subtask in plan.subtasks:
            if not subtask.condition:
                continue
            names = condition_names(subtask.condition)
            if names is None:
                yield Violation(
                    "conditions_observable",
                    f"condition {subtask.condition!r} must read '<object> under|in|on|at <object or location>' "
                    "or '<object> present|absent'",
                    subtask.id,
                )
                continue
            unknown = [n for n in names if n not in everything]
            if unknown:
                yield Violation(
                    "conditions_observable", f"condition names unknown {', '.join(map(repr, unknown))}", subtask.id
                )
            observed_first = any(by_id[a].kind == "observe" for a in ancestors(subtask, by_id))
            if not observed_first:
                yield Violation(
                    "conditions_observable",
                    "a conditional subtask must depend on an observe subtask that can settle its condition",
                    subtask.id,
                )

    def _where_things_are(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        """Look where memory puts things, search where it knows nothing, act on what a look
        saw (core/scene_checks.py)."""
        yield from (Violation(*found) for found in scene_problems(plan, facts))

    def _action_requested(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        if facts.asks_for_action:
            return
        for subtask in plan.subtasks:
            if subtask.kind in ("vla", "control"):
                yield Violation(
                    "action_requested",
                    "the user asked a question or stated a fact; do not move objects unless asked to",
                    subtask.id,
                )

    def _reply_matches(self, plan: Plan, _facts: PlanningFacts) -> Iterable[Violation]:
        for subtask in plan.subtasks:
            if subtask.kind == "vla" and subtask.target and not mentions(plan.reply, subtask.target):
                yield Violation(
                    "reply_matches_subtasks",
                    f"the reply does not mention {_spoken(subtask.target)!r}, which subtask {subtask.id} acts on",
                    subtask.id,
                )
        if not plan.physical and plan.refusal is None and ACTION_PROMISES.search(plan.reply):
            yield Violation("reply_matches_subtasks", "the reply promises an action but the plan has no subtasks")

    def _observations_recorded(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        recorded = {
            op.location
            for op in plan.memory_operations
            if isinstance(op, UpdateScene) and op.action == "set_contents" and op.location
        }
        for location in sorted(facts.pending_observations):
            if location not in recorded:
                seen = ", ".join(facts.pending_observations[location]) or "nothing"
                yield Violation(
                    "observation_updates_scene",
                    f"an observation of {location} saw {seen}: add update_scene set_contents for {location} "
                    "in this plan, before the next physical step",
                )

    def _foreign_facts(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        """Another user's value in what this plan writes, or in its prose unless the scene
        and the library use the word too ("white" of bob's bread vs the white bowl)."""
        foreign = {readable(f) for f in facts.foreign_facts - facts.user_facts if len(f) >= 3}
        if not foreign:
            return
        writes = [readable(op.value) for op in plan.memory_operations if isinstance(op, UpdateUser)]
        prose = [readable(t) for t in (plan.reply, plan.refusal or "", *(s.objective for s in plan.subtasks))]
        vocabulary = {w for n in (*facts.objects, *facts.locations, *facts.instructions) for w in _words(n)}
        vocabulary |= {w for value in facts.user_facts for w in _words(value)}
        request = readable(facts.request)
        for value in sorted(foreign):
            if value in request:
                continue  # the user said it themselves
            pattern = re.compile(rf"\b{re.escape(value)}\b")
            in_prose = not set(_words(value)) <= vocabulary and any(pattern.search(t) for t in prose)
            if in_prose or any(pattern.search(t) for t in writes):
                yield Violation(
                    "no_foreign_facts", f"{value!r} is another user's stored fact, not this user's; do not use it"
                )

    def _other_users(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        """Nothing about another user is written into this user's memory (entity, key or value),
        and a request about another user's memory ("Is Iris allergic to anything?", "Give
        me whatever Henry usually snacks on") is refused: what they like is theirs."""
        about = about_other_users(facts.request, facts.other_users)
        if about and plan.refusal is None:
            yield Violation(
                "no_other_users",
                f"the request is about what another user ({', '.join(about)}) likes or is: refuse; their memory is "
                "theirs",
            )
        for op in plan.memory_operations:
            if not isinstance(op, UpdateUser):
                continue
            text = readable(f"{op.entity} {op.key} {op.value}")
            named = sorted(users_named(text, facts.other_users))
            if named:
                yield Violation(
                    "no_other_users",
                    f"update_user {op.entity}.{op.key} names another user ({', '.join(named)}): this user's memory "
                    "holds only this user's facts; leave it out",
                )

    def _preferences(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        asked = asked_ruled_out(facts)
        moves = [(s.id, s.target) for s in plan.subtasks if s.kind in ("vla", "control")]
        if asked and standing_in(moves, facts):
            yield Violation(
                "preference_conflict",
                f"the user asks for {_spoken(asked[0])}, which their preference '{facts.ruled_out[asked[0]]}' rules "
                "out: do nothing in its place (only what else the request names); tell the user why in the reply",
            )
        for subtask in plan.subtasks:
            conflict = preference_conflict(subtask, facts)
            if conflict is not None:
                name, preference = conflict
                yield Violation(
                    "preference_conflict",
                    f"{_spoken(name)} conflicts with the user's preference '{preference}': do not serve it; tell "
                    "the user why in the reply",
                    subtask.id,
                )

    def _ask_first(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        """What might break a constraint that nothing settles is not served: the user is asked."""
        yield from (Violation(*found) for found in ask_first_problems(plan, facts))

    def _memory_and_library(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        """What memory says the request uses, covers to open, a family copied whole (core/usual.py)."""
        if plan.refusal is None:
            yield from (Violation(*found) for found in problems(plan, facts))

    def _acts_on_request(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        """What the request names is acted on; a closed request gets nothing else (core/scope.py)."""
        yield from (Violation(*found) for found in scope_problems(plan, facts))

    def _wish_remembered(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        """A preference the request revises is written, with the durability its words give
        ("just today": durable false; "from now on": durable true)."""
        wish = facts.wish
        if wish is None or plan.refusal is not None or wish_written(plan, wish):
            return
        yield Violation(
            "wish_remembered",
            f"the user said {wish.why!r}: add update_user entity {wish.entity!r} key {wish.key!r} value "
            f"{wish.value!r} durable {str(wish.durable).lower()}",
        )

    def _answers_remembered(self, plan: Plan, facts: PlanningFacts) -> Iterable[Violation]:
        """What the user says an object has or lacks is remembered, so that nobody asks again."""
        for said in unwritten(plan, facts.answers):
            write = answer_write(said)
            yield Violation(
                "answer_remembered",
                f"the user says the {_spoken(said.obj)} {write.value.replace('no ', 'has no ', 1)}: add update_user "
                f"entity {write.entity!r} key {write.key!r} value {write.value!r} durable true",
            )
