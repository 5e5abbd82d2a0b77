"""Step plans: the compact answer the planner asks a small local model for.

A full plan (core/plan.py) spells every subtask out: id, kind, objective, instruction,
target, source, destination, dependencies, condition, about 70 tokens each. Read in the
1.5B model's answers, most of those tokens were copied (the target is in the instruction,
the source in scene memory, the dependencies a chain), and a bag of 16 items ran past
`max_tokens` before the plan closed. A step plan says only what needs a decision: each
step's instruction (a library entry, ``observe <location>`` or ``control <skill>``) and
when it runs; `expand` derives the rest deterministically, and the validator, the mends
and the execution loop see an ordinary Plan. Steps run in order: step N is subtask sN
and depends on the step before it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import Field

from carryon_planner.core.plan import (
    MemoryOperation,
    Plan,
    PlannedSubtask,
    _Strict,
    narrow_shared,
    parse_model,
)

OBSERVE, CONTROL = "observe ", "control "


class Step(_Strict):
    """One step: `do` is a skill-library instruction copied verbatim, "observe <location>"
    or "control <skill>"; `when` an observable condition it needs ("" = always)."""

    do: str = Field(min_length=1, max_length=200)
    when: str = Field("", max_length=120, description='e.g. "carrot under pink_cover" ("" = always).')


class StepPlan(_Strict):
    """The planner's answer to one request, as steps."""

    reply: str = Field(min_length=1, max_length=600, description="What the assistant says to the user.")
    steps: list[Step] = Field(default_factory=list, max_length=16)
    memory_operations: list[MemoryOperation] = Field(default_factory=list, max_length=16)
    refusal: str | None = Field(None, max_length=300, description="Why the request is refused (then no steps).")


_SCHEMA = StepPlan.model_json_schema()


def steps_json_schema(
    instructions: Sequence[str] = (),
    names: Sequence[str] = (),
    *,
    control_skills: Sequence[str] = (),
    moves: bool = True,
    locations: Sequence[str] | None = None,
) -> dict[str, Any]:
    """JSON Schema of a step plan for grammar-constrained decoding: `do` is one of the
    library's instructions, "observe <location>" or "control <skill>", `when` one of the
    validator's condition forms over `names`, a scene update's location one of
    `locations`. `moves` True (an order): the steps are required, right after the reply;
    False (a question or a statement): only observe steps, and the memory operations come
    first and are required."""
    schema = copy.deepcopy(_SCHEMA)
    step = schema["$defs"]["Step"]["properties"]
    places = sorted(set(names if locations is None else locations))
    looks = [OBSERVE + place for place in places]
    if instructions or places:
        step["do"]["enum"] = looks if not moves else [*sorted(set(instructions)), *looks]
        step["do"]["enum"] += [CONTROL + skill for skill in control_skills] if moves else []
    narrow_shared(schema, step["when"], names, locations=locations, moves=moves)
    if moves:
        # Required, right after the reply: a grammar may skip an optional property, and the
        # 1.5B model did, answering "I will ... put the ham on the bread" with no steps.
        schema["required"] = ["reply", "steps"]
    return schema


def parse_steps(text: str) -> StepPlan:
    """A StepPlan from the model's reply text (PlanParseError listing every problem)."""
    return parse_model(text, StepPlan)


def named_in(instruction: str, names: Sequence[str]) -> list[str]:
    """The known names an instruction mentions, in the order it mentions them, longest
    first where two overlap ("put the peanut butter on the bread" -> peanut_butter, bread)."""
    text, found, taken = instruction.lower().replace("-", " "), [], set[int]()  # "sesame-free hummus"
    for name in sorted(set(names), key=len, reverse=True):
        spoken = name.lower().replace("_", " ")
        for match in re.finditer(rf"\b{re.escape(spoken)}\b", text):
            span = set(range(match.start(), match.end()))
            if not span & taken:
                taken |= span
                found.append((match.start(), name))
    return [name for _, name in sorted(found)]


def expand(
    steps: StepPlan,
    names: Sequence[str],
    whereabouts: Mapping[str, str],
    declared: Mapping[str, Sequence[str]] | None = None,
) -> Plan:
    """The full Plan a step plan stands for: step N is subtask sN, after step N-1; a
    library instruction's subtask is `vla_subtask`'s (`declared`: the objects the library
    declares for an instruction, what it moves, then where to)."""
    subtasks: list[PlannedSubtask] = []
    for number, step in enumerate(steps.steps, start=1):
        after = [subtasks[-1].id] if subtasks else []
        common: dict[str, Any] = {"id": f"s{number}", "depends_on": after, "condition": step.when}
        if step.do.startswith(OBSERVE):
            place = step.do.removeprefix(OBSERVE)
            subtask = PlannedSubtask(kind="observe", objective=f"see what is at the {place}", target=place, **common)
        elif step.do.startswith(CONTROL):
            skill = step.do.removeprefix(CONTROL)
            subtask = PlannedSubtask(kind="control", objective=f"{skill} done", instruction=skill, **common)
        else:
            subtask = vla_subtask(step.do, names, whereabouts, declared, **common)
        subtasks.append(subtask)
    return Plan(
        reply=steps.reply,
        subtasks=subtasks,
        memory_operations=list(steps.memory_operations),
        refusal=steps.refusal,
    )


def vla_subtask(
    instruction: str,
    names: Sequence[str],
    whereabouts: Mapping[str, str],
    declared: Mapping[str, Sequence[str]] | None = None,
    **common: Any,
) -> PlannedSubtask:
    """A VLA subtask for a library `instruction`: its objects are those the library
    declares for it, else the known names it mentions; the first is its target, the last
    one after it its destination, and scene memory's place for the target its source.
    `common`: id, depends_on, condition."""
    mentioned = list((declared or {}).get(instruction, ())) or named_in(instruction, names)
    target = mentioned[0] if mentioned else ""
    return PlannedSubtask(
        kind="vla",
        objective=instruction,
        instruction=instruction,
        target=target,
        source=whereabouts.get(target, ""),
        destination=mentioned[-1] if len(mentioned) > 1 else "",
        **common,
    )


def as_steps(plan: Plan) -> StepPlan:
    """A plan (a mended one) shown back to the model in the form it answers in; the order
    of its subtasks is the order of the steps."""
    steps = []
    for subtask in plan.subtasks:
        if subtask.kind == "observe":
            steps.append(Step(do=OBSERVE + subtask.target, when=subtask.condition))
        elif subtask.kind == "control":
            steps.append(Step(do=CONTROL + subtask.instruction, when=subtask.condition))
        elif subtask.kind == "vla":
            steps.append(Step(do=subtask.instruction, when=subtask.condition))
    return StepPlan(reply=plan.reply, steps=steps, memory_operations=list(plan.memory_operations), refusal=plan.refusal)
