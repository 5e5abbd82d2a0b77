"""Checks of where things are (issue 20), for the validator: a VLA step looks where scene
memory puts its object first (`observe_before_act`), searches where memory holds nothing
for an object it places nowhere (`search_before_act`), and in a replan after a look acts on
what was seen (`act_on_what_is_there`). Each problem is (check, message, subtask id), as
core/usual.py's `problems`; core/mend.py mends them."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from carryon_planner.core.plan import Plan, PlannedSubtask, ancestors

if TYPE_CHECKING:  # the validator imports this module
    from carryon_planner.core.validator import PlanningFacts


def _spoken(name: str) -> str:
    return name.replace("_", " ").lower()


def scene_problems(plan: Plan, facts: PlanningFacts) -> Iterator[tuple[str, str, str]]:
    """Scene memory says where to look, not what is there now: a VLA subtask on an object
    remembered at a location waits for an observe of that location (unless it was observed
    since the last plan); one on an object placed nowhere waits for looks where memory holds
    nothing; what was not seen where memory put it is not acted on, nor a cover opened that
    hides nothing the plan then uses."""
    by_id = {s.id: s for s in plan.subtasks}
    for subtask in plan.subtasks:
        place = unobserved_place(subtask, by_id, facts)
        if place:
            yield (
                "observe_before_act",
                f"{_spoken(subtask.target)} is remembered at {place}: add an observe subtask of {place} "
                "and make this subtask depend on it",
                subtask.id,
            )
        places = unsearched_places(subtask, by_id, facts)
        if places:
            yield (
                "search_before_act",
                f"scene memory does not say where {_spoken(subtask.target)} is: add observe subtasks of "
                f"{', '.join(places)} and make this subtask depend on them",
                subtask.id,
            )
        if subtask.kind == "vla" and subtask.target in facts.gone:
            yield (
                "act_on_what_is_there",
                f"{_spoken(subtask.target)} was not seen when its place was looked at: do not act on it",
                subtask.id,
            )
        elif nowhere(subtask, facts):
            yield (
                "act_on_what_is_there",
                f"scene memory has no {_spoken(subtask.target)} anywhere, every place holds something else, and the "
                "request does not ask for it: do not act on it",
                subtask.id,
            )
        elif needless_uncover(subtask, by_id, facts):
            yield (
                "act_on_what_is_there",
                f"nothing the plan acts on is under {_spoken(subtask.target)}: do not open it",
                subtask.id,
            )


def unobserved_place(subtask: PlannedSubtask, by_id: Mapping[str, PlannedSubtask], facts: PlanningFacts) -> str:
    """The location scene memory puts a VLA subtask's target at when no subtask before it
    observes that location and it was not observed since the last plan ("" otherwise)."""
    place = facts.whereabouts.get(subtask.target, "") if subtask.kind == "vla" else ""
    if not place or place in facts.pending_observations:
        return ""
    looked = any(by_id[a].kind == "observe" and by_id[a].target == place for a in ancestors(subtask, by_id))
    return "" if looked else place


def unsearched_places(subtask: PlannedSubtask, by_id: Mapping[str, PlannedSubtask], facts: PlanningFacts) -> list[str]:
    """The locations a VLA subtask's target must be looked for at first: when neither scene
    memory nor an observation since the last plan places it, every location scene memory
    holds nothing at (not looked at yet, or emptied) that no subtask before it observes and
    no such observation covered ([] otherwise)."""
    target = subtask.target if subtask.kind == "vla" else ""
    seen = {item.split()[0] for items in facts.pending_observations.values() for item in items if item.split()}
    if not target or target in facts.whereabouts or target in seen:
        return []
    looked = {by_id[a].target for a in ancestors(subtask, by_id) if by_id[a].kind == "observe"}
    unknown = facts.locations - set(facts.whereabouts.values())  # memory holds nothing there
    return sorted(unknown - looked - set(facts.pending_observations))


def nowhere(subtask: PlannedSubtask, facts: PlanningFacts) -> bool:
    """Whether a VLA subtask acts on an object neither the request nor the user's remembered
    facts name ("my favourite snack": meat) that neither scene memory nor an observation
    places anywhere, where there is nowhere left to look for it
    (memory holds something at every location): "Serve me food" answered with the carrot
    the library can serve, though memory has only meat under the cover."""
    target = subtask.target if subtask.kind == "vla" else ""
    if not target or facts.in_scene is None or target in facts.in_scene or target not in facts.objects:
        return False
    if target in facts.whereabouts or facts.locations - set(facts.whereabouts.values()):
        return False  # placed (the user said where), or there is somewhere left to look for it
    named = rf"\b{re.escape(_spoken(target))}"  # by the request, or by what the user's memory says
    return not any(re.search(named, text.lower()) for text in (facts.request, *facts.user_facts))


def needless_uncover(subtask: PlannedSubtask, by_id: Mapping[str, PlannedSubtask], facts: PlanningFacts) -> bool:
    """Whether, in a plan made after an observation, a VLA subtask opens a known cover under
    which scene memory (as the observations leave it) has nothing a later subtask acts on."""
    if subtask.kind != "vla" or subtask.target not in facts.known_covers or not facts.pending_observations:
        return False
    hidden = {o for o, cover in facts.covers.items() if cover == subtask.target}
    later = (s for s in by_id.values() if subtask.id in ancestors(s, by_id))
    return not any(s.target in hidden for s in later)
