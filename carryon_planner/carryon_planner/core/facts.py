"""What the validator checks a plan against, gathered from memory and the skill library."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from carryon_planner.core.validator import PlanningFacts
from carryon_policy.core.skills import SkillLibrary

_RELATIONS = {"under", "in", "on", "at", "inside", "near", "beside", "behind"}


def objects_in_contents(items: Iterable[str]) -> set[str]:
    """Object names in scene-memory entries: "carrot under pink_cover" -> {carrot, pink_cover}."""
    names: set[str] = set()
    for item in items:
        words = re.findall(r"[a-z0-9_]+", item.lower())
        names |= {w for w in words if w not in _RELATIONS and w not in ("the", "a", "an")}
    return names


def planning_facts(
    *,
    request: str,
    scene: Mapping[str, Sequence[str]],
    library: SkillLibrary,
    user_facts: Iterable[str] = (),
    foreign_facts: Iterable[str] = (),
    pending_observations: Mapping[str, tuple[str, ...]] | None = None,
) -> PlanningFacts:
    """Objects: everything scene memory mentions plus what the library's skills act on;
    locations: scene memory's named locations."""
    objects = objects_in_contents(item for items in scene.values() for item in items)
    for skill in library.vla:
        if skill.script is not None:
            objects |= {skill.script.object, skill.script.destination} - {""}
    return PlanningFacts(
        request=request,
        instructions=library.instructions,
        objects=frozenset(objects),
        locations=frozenset(scene),
        user_facts=frozenset(user_facts),
        foreign_facts=frozenset(foreign_facts),
        pending_observations=dict(pending_observations or {}),
    )
