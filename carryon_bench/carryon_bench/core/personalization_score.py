"""Personalization suites (paper §4.1): requests with a user's memory, scored on what the
planner would dispatch.

A suite file (config/planner/personalization/*.yaml) holds a skill library, users' memory,
scene memory and cases. Each case is planned exactly as planner_node plans an Ask (the
same context, validator and repair loop, the configured LLM) and scored against its
expectations: which VLA instructions must / must not be dispatched, which locations must
be observed first, refusals, and the memory operations that must appear. A case passes
when every expectation holds; dispatch accuracy = passed / cases.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from carryon_common.core.config import format_validation_error, read_yaml
from carryon_common.core.errors import ConfigError
from carryon_common.core.llm import LlmClient
from carryon_common.core.skills import SkillLibrary, VlaSkill
from carryon_memory.core.others import foreign_values
from carryon_memory.core.render import render_context
from carryon_memory.core.types import Fact, Location
from carryon_planner.core.knowledge import FoodKnowledge
from carryon_planner.core.learned_kinds import LearnedKinds
from carryon_planner.core.memory_ops import MemoryContext, StoredFact
from carryon_planner.core.plan import Plan, UpdateScene, UpdateUser, ancestors
from carryon_planner.core.repair import PlanningOutcome
from carryon_planner.core.request_planner import RequestPlanner
from carryon_planner.core.taxonomy import Taxonomy

UserMemory = dict[str, dict[str, str]]  # entity -> key -> value


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Remember(_Strict):
    """An update_user operation the plan must contain: `key` (and `entity` when given),
    a value containing `value` (case-insensitive), and the durable flag."""

    key: str
    value: str
    durable: bool
    entity: str = ""


class Expect(_Strict):
    """What a correct answer does. refuse: no physical subtask is dispatched (a refusal
    or a reply only); include: VLA instructions that must be dispatched; forbid: ones the
    user's diet, allergy, a remembered dislike or an explicit wish in the request rules out
    (counted over every case by the bench: the planner must dispatch none); exclude: ones
    that are wrong for this request but that no preference rules out (a laptop in a
    swimming bag); only: nothing but `include` is dispatched (a sandwich is the user's filling,
    not every allowed ingredient); observe_first: locations observed before (an ancestor
    of) every VLA subtask; remember: update_user operations; scene_updates: locations the
    plan must write with update_scene; reply_excludes: words the reply must not contain;
    ask: objects (scene names) whose kinds no trusted source can settle for this user's
    constraints: the reply must ask about each, and no subtask that names one is dispatched.
    Every case is scored on questions: one about an object not in `ask` is a miss (the
    answer was knowable)."""

    refuse: bool = False
    include: list[str] = Field(default_factory=list)
    only: bool = False
    forbid: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    observe_first: list[str] = Field(default_factory=list)
    remember: list[Remember] = Field(default_factory=list)
    scene_updates: list[str] = Field(default_factory=list)
    reply_excludes: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _disjoint(self) -> Expect:
        for a, b in (("include", "forbid"), ("include", "exclude"), ("forbid", "exclude")):
            both = set(getattr(self, a)) & set(getattr(self, b))
            if both:
                raise ValueError(f"{sorted(both)} in both {a} and {b}")
        return self


class Case(_Strict):
    """One request. `users` / `scene` replace the suite's memory for this case only;
    observations: what observe subtasks revealed since the last plan (location -> items)."""

    id: str = Field(pattern=r"^[a-z0-9_]+$")
    user: str
    request: str = Field(min_length=1)
    expect: Expect
    users: dict[str, UserMemory] | None = None
    scene: dict[str, list[str]] | None = None
    observations: dict[str, list[str]] = Field(default_factory=dict)
    note: str = ""


class Suite(_Strict):
    name: str = Field(pattern=r"^[a-z0-9_]+$")
    description: str
    library: list[VlaSkill]
    users: dict[str, UserMemory] = Field(default_factory=dict)
    scene: dict[str, list[str]] = Field(default_factory=dict)
    cases: list[Case] = Field(min_length=1)


def load_suite(path: Path) -> Suite:
    try:
        return Suite.model_validate(read_yaml(path))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, {}, str(path))) from None


def load_suites(folder: Path, only: Sequence[str] = ()) -> list[Suite]:
    """Every *.yaml suite in `folder` (sorted by file name), or just the named ones."""
    suites = [load_suite(path) for path in sorted(folder.glob("*.yaml"))]
    if not suites:
        raise ConfigError(f"no personalization suites (*.yaml) in {folder}")
    unknown = set(only) - {s.name for s in suites}
    if unknown:
        raise ConfigError(f"unknown suite(s) {sorted(unknown)}; known: {[s.name for s in suites]}")
    return [s for s in suites if not only or s.name in only]


@dataclass(frozen=True)
class CaseResult:
    suite: str
    case: str
    passed: bool
    failures: tuple[str, ...]
    refused: bool
    dispatched: tuple[str, ...]  # "kind:instruction-or-target" of every physical subtask
    reply: str
    llm_rounds: int
    seconds: float
    rejected: tuple[str, ...] = field(default_factory=tuple)  # why earlier rounds were rejected
    mended: tuple[str, ...] = field(default_factory=tuple)  # what the planner mended without the LLM
    replies: tuple[str, ...] = field(default_factory=tuple)  # the LLM's raw answer in each round
    questions: tuple[str, ...] = field(default_factory=tuple)  # objects the reply asked the user about


def score(plan: Plan, refused: bool, expect: Expect, questions: Sequence[str] = ()) -> list[str]:
    """Every expectation the outcome misses (empty: the case passes). `questions`: the
    objects the planner asked the user about."""
    failures: list[str] = []
    physical = [] if refused else plan.physical
    vla = [s for s in physical if s.kind == "vla"]
    instructions = {s.instruction for s in vla}
    asked = {_spoken(q) for q in questions}
    wanted = {_spoken(q) for q in expect.ask}
    failures += [f"did not ask about {q!r}" for q in sorted(wanted - asked)]
    failures += [f"asked about {q!r}, which was knowable" for q in sorted(asked - wanted)]
    for q in sorted(wanted):
        handed = sorted(
            s.instruction or s.target for s in physical if f" {q} " in f" {_spoken(f'{s.instruction} {s.target}')} "
        )
        failures += [f"dispatched {h!r} before asking about {q!r}" for h in handed]
    if expect.refuse and vla:
        failures.append(f"expected no dispatch, got {sorted(instructions)}")
    if not expect.refuse and refused:
        failures.append(f"refused: {plan.refusal}")
    failures += [f"missing {wanted!r}" for wanted in expect.include if wanted not in instructions]
    failures += [f"dispatched forbidden {bad!r}" for bad in forbidden_dispatches(instructions, expect)]
    failures += [f"dispatched excluded {bad!r}" for bad in expect.exclude if bad in instructions]
    if expect.only:
        failures += [f"dispatched unasked {extra!r}" for extra in sorted(instructions - set(expect.include))]
    by_id = {s.id: s for s in plan.subtasks}
    for location in expect.observe_first:
        observers = {s.id for s in plan.subtasks if s.kind == "observe" and s.target == location}
        if not observers:
            failures.append(f"no observe of {location}")
        elif any(not observers & ancestors(s, by_id) for s in vla):
            failures.append(f"a VLA subtask does not wait for the observe of {location}")
    users = [op for op in plan.memory_operations if isinstance(op, UpdateUser)]
    for want in expect.remember:
        if refused or not any(
            op.key.lower() == want.key.lower()
            and (not want.entity or op.entity.lower() == want.entity.lower())
            and want.value.lower() in op.value.lower()
            and op.durable == want.durable
            for op in users
        ):
            failures.append(f"no update_user {want.key}~{want.value!r} durable={want.durable}")
    scenes = {op.location for op in plan.memory_operations if isinstance(op, UpdateScene) and not refused}
    failures += [f"no update_scene of {loc}" for loc in expect.scene_updates if loc not in scenes]
    reply = plan.reply.lower()
    failures += [f"reply mentions {word!r}" for word in expect.reply_excludes if word.lower() in reply]
    return failures


def _spoken(name: str) -> str:
    """An object's name as an instruction says it: `pad_thai` -> `pad thai`."""
    return " ".join(name.lower().replace("_", " ").split())


def forbidden_dispatches(dispatched: Iterable[str], expect: Expect) -> list[str]:
    """The instructions in `dispatched` (VLA instructions, or a CaseResult's "kind:instruction"
    entries) that the user's preferences or wishes rule out (`expect.forbid`)."""
    said = {entry.removeprefix("vla:") for entry in dispatched}
    return [bad for bad in expect.forbid if bad in said]


def memory_context(user: str, users: Mapping[str, UserMemory], scene: Mapping[str, Sequence[str]]) -> MemoryContext:
    """What memory_node's GetContext gives the planner for `user`, from user and scene memory
    held in dictionaries, rendered by memory's own code: the user's facts, the scene memory,
    and for the validator's cross-user checks (carryon_memory/core/others.py) the other users
    and the values only they hold. The planner's tests plan from it too."""
    facts = [Fact(entity, key, value) for entity, keys in users.get(user, {}).items() for key, value in keys.items()]
    scene_items = {name: tuple(items) for name, items in scene.items()}
    others = tuple(sorted(u for u in users if u != user))
    theirs = (value for other in others for keys in users[other].values() for value in keys.values())
    return MemoryContext(
        rendered=render_context(
            user, facts, (), [Location(name, items) for name, items in scene_items.items()], known_user=user in users
        ),
        facts=tuple(StoredFact(f.entity, f.key, f.value) for f in facts),
        scene=scene_items,
        other_users=others,
        foreign_values=foreign_values((f.value for f in facts), theirs),
    )


def plan_request(
    llm: LlmClient,
    *,
    request: str,
    user: str,
    users: Mapping[str, UserMemory],
    scene: Mapping[str, Sequence[str]],
    library: SkillLibrary,
    preference_rules: Taxonomy,
    max_repairs: int,
    observations: Mapping[str, Sequence[str]] | None = None,
    learned: LearnedKinds | None = None,
    steps: bool = False,
    knowledge: FoodKnowledge | None = None,
) -> PlanningOutcome:
    """Plan one request from in-memory user and scene memory exactly as planner_node plans
    an Ask from memory_node's context (the same RequestPlanner: rendering, context,
    validator, mending, repair, and `learned` kinds when given; the other users and the
    values only they hold, for the cross-user checks, as memory_node gives them)."""
    context = memory_context(user, users, scene)
    planner = RequestPlanner(
        llm, library, preference_rules, max_repairs, learned=learned, knowledge=knowledge, steps=steps
    )
    return planner.plan(user, request, context, observations)


def run_case(
    llm: LlmClient,
    suite: Suite,
    case: Case,
    *,
    preference_rules: Taxonomy,
    max_repairs: int,
    learned: LearnedKinds | None = None,
    steps: bool = False,
    knowledge: FoodKnowledge | None = None,
) -> CaseResult:
    """Plan one case as planner_node would and score it."""
    began = time.perf_counter()
    outcome = plan_request(
        llm,
        request=case.request,
        user=case.user,
        users=case.users if case.users is not None else suite.users,
        scene=case.scene if case.scene is not None else suite.scene,
        library=SkillLibrary(vla=list(suite.library)),
        preference_rules=preference_rules,
        max_repairs=max_repairs,
        observations=case.observations,
        learned=learned,
        steps=steps,
        knowledge=knowledge,
    )
    seconds = time.perf_counter() - began
    failures = score(outcome.plan, outcome.refused, case.expect, outcome.questions)
    physical = () if outcome.refused else outcome.plan.physical
    dispatched = tuple(f"{s.kind}:{s.instruction or s.target}" for s in physical)
    return CaseResult(
        suite.name,
        case.id,
        not failures,
        tuple(failures),
        outcome.refused,
        dispatched,
        outcome.plan.reply,
        len(outcome.attempts),
        seconds,
        tuple(a.rejected_because for a in outcome.attempts if a.rejected_because),
        tuple(fix for a in outcome.attempts for fix in a.mended),
        tuple(a.reply for a in outcome.attempts),
        tuple(outcome.questions),
    )


def run_suites(
    llm: LlmClient,
    suites: Sequence[Suite],
    *,
    preference_rules: Taxonomy,
    max_repairs: int,
    cases_per_suite: int = 0,
    on_result: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Every case (or the first `cases_per_suite` of each suite when > 0)."""
    results = []
    for suite in suites:
        for case in suite.cases[: cases_per_suite or None]:
            result = run_case(llm, suite, case, preference_rules=preference_rules, max_repairs=max_repairs)
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def accuracy(results: Sequence[CaseResult]) -> dict[str, float]:
    """Dispatch accuracy (0..1) per suite, plus "all"."""
    out: dict[str, float] = {}
    for name in dict.fromkeys(r.suite for r in results):
        mine = [r for r in results if r.suite == name]
        out[name] = sum(r.passed for r in mine) / len(mine)
    if results:
        out["all"] = sum(r.passed for r in results) / len(results)
    return out
