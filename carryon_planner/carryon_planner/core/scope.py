"""Plans act on what was asked: the request's scope, read without the model.

The 1.5B model's answers run on or fall short: "Make me a sandwich" answered with every
other instruction of the library, "hummus with crudites" answered with sixteen looks at
the counter and nothing served. Two general rules bound a plan by what the request names:

* **Nothing named is left out.** Every object the request names that the robot can hand
  over (the target of a library instruction) is acted on, unless the user's preferences
  rule it out, a question about it is asked first (core/ask_back.py), memory's place for
  it was looked at and it was not there, or the request names it as one of alternatives
  ("the tea or the coffee": one of them does). Otherwise the plan is not dispatched: the
  LLM is told what it left out and plans again (a repair round, core/repair.py), since
  which instruction serves it is the model's choice.
* **Nothing unasked is done.** When the request is *closed* (it names what it wants and
  leaves no open phrase once those names are taken out: no "something", "a snack", "some
  fruit"), a physical subtask must act on one of the objects it names, on what the user's
  remembered usual for it names, on what such a subtask builds on (the bread under the
  asked-for ham) or on a cover over them. The others are dropped by a deterministic repair
  that says why (core/mend.py). An open request leaves the choice to the model and the other checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from carryon_planner.core.plan import Plan, PlannedSubtask
from carryon_planner.core.steps import named_in
from carryon_planner.core.wishes import wanted_names

if TYPE_CHECKING:  # the validator imports this module
    from carryon_planner.core.validator import PlanningFacts

CHECK = "acts_on_request"
# What is left of a request once the names in it are taken out, that leaves the choice open.
_OPEN = re.compile(r"\b(?:something|anything|whatever|whichever|a|an|some|any|few|couple|other|more)\b")
_OR = re.compile(r"\b(?:or|either)\b")


def spoken(name: str) -> str:
    return name.replace("_", " ").lower()


def _served_by_library(facts: PlanningFacts) -> set[str]:
    """The objects a library instruction moves (its first declared or named object)."""
    names = sorted(facts.objects)
    out = set()
    for instruction in facts.instructions:
        found = list(facts.skill_objects.get(instruction, ())) or named_in(instruction, names)
        if found:
            out.add(found[0])
    return out


def requested(facts: PlanningFacts) -> list[list[str]]:
    """The objects the request names that the robot can hand over, in its order, as groups
    of alternatives (one of a group is enough): [[tea, coffee], [biscuit]] for "the tea or
    the coffee, and a biscuit"."""
    movable = _served_by_library(facts)
    wanted = [n for n in wanted_names(facts.request, sorted(facts.objects)) if n in movable]
    text = facts.request.lower().replace("-", " ").replace("_", " ")
    groups: list[list[str]] = []
    for name in wanted:
        if groups:
            previous = groups[-1][-1]
            between = _between(text, spoken(previous), spoken(name))
            if between is not None and _OR.search(between):
                groups[-1].append(name)
                continue
        groups.append([name])
    return groups


def _between(text: str, first: str, second: str) -> str | None:
    a = re.search(rf"\b{re.escape(first)}\b", text)
    b = re.search(rf"\b{re.escape(second)}\b", text)
    return None if a is None or b is None or b.start() < a.end() else text[a.end() : b.start()]


def is_closed(facts: PlanningFacts) -> bool:
    """Whether the request names what it wants and leaves nothing open: some object is
    named, and once every known name is taken out no open phrase ("something", "a snack",
    "some fruit") is left."""
    if not requested(facts):
        return False
    text = facts.request.lower().replace("-", " ").replace("_", " ")
    for name in sorted(facts.objects | facts.locations, key=len, reverse=True):
        text = re.sub(rf"\b(?:(?:a|an|some|any)\s+)?{re.escape(spoken(name))}s?\b", " ", text)
    return _OPEN.search(text) is None


def _acted_on(subtasks: Sequence[PlannedSubtask], names: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for s in subtasks:
        if s.kind == "vla":
            out |= {s.target, s.destination, *named_in(s.instruction, names)}
    return out - {""}


def _excused(facts: PlanningFacts) -> set[str]:
    """What the plan may leave out of what the request names: ruled out, asked about first,
    not where memory put it when that place was looked at, or only said to be somewhere now."""
    return set(facts.ruled_out) | set(facts.unsettled) | set(facts.gone) | set(facts.stated)


def left_out(plan: Plan, facts: PlanningFacts) -> list[str]:
    """The named objects (one per group of alternatives) the plan neither acts on nor may
    leave out."""
    if plan.refusal is not None or not facts.asks_for_action:
        return []
    acted = _acted_on(plan.subtasks, sorted(facts.objects))
    excused = _excused(facts)
    return [group[0] for group in requested(facts) if not set(group) & acted and not set(group) & excused]


def unasked(subtasks: Sequence[PlannedSubtask], facts: PlanningFacts) -> list[str]:
    """The ids of the physical subtasks a closed request does not ask for (none for an open
    request): those acting on nothing it names, nothing its remembered usual names, nothing
    an asked-for subtask builds on and no cover."""
    if not is_closed(facts) or not facts.asks_for_action:
        return []
    names = sorted(facts.objects)
    asked = {n for group in requested(facts) for n in group}
    asked |= {o for r in facts.remembered if r.named for o in r.objects}
    in_scope = [s for s in subtasks if s.kind == "vla" and set(named_in(s.instruction, names)) & asked]
    # what they build on: the other objects of the asked-for steps (the bread under the ham)
    builds_on = {n for s in in_scope for n in named_in(s.instruction, names)} | {s.destination for s in in_scope}
    allowed = asked | builds_on | set(facts.known_covers) | set(facts.covers.values())
    return [s.id for s in subtasks if s.kind == "vla" and s.target and s.target not in allowed]


def scope_problems(plan: Plan, facts: PlanningFacts) -> Iterator[tuple[str, str, str]]:
    """The validator's checks of this module: (check, message, subtask id) each."""
    for name in left_out(plan, facts):
        yield (
            CHECK,
            f"the user asks for the {spoken(name)}, but no step acts on it: add the library step that serves it "
            "(or refuse and say why)",
            "",
        )
    for subtask_id in unasked(plan.subtasks, facts):
        yield CHECK, "the request does not ask for this: leave it out", subtask_id
