"""What the validator checks a plan against, gathered from memory and the skill library."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from carryon_common.core.config import config_path
from carryon_common.core.skills import SkillLibrary
from carryon_planner.core.constraints import read_constraints, settle
from carryon_planner.core.knowledge import Confirmation, FoodKnowledge
from carryon_planner.core.steps import named_in
from carryon_planner.core.taxonomy import Taxonomy, load_taxonomy, request_wishes, ruled_out
from carryon_planner.core.usual import Remembered, stated_moves
from carryon_planner.core.validator import PlanningFacts
from carryon_planner.core.words import tokens

_RELATIONS = {"under", "in", "on", "at", "inside", "near", "beside", "behind"}


def objects_in_contents(items: Iterable[str]) -> set[str]:
    """Object names in scene-memory entries: "carrot under pink_cover" -> {carrot, pink_cover}."""
    names: set[str] = set()
    for item in items:
        words = re.findall(r"[a-z0-9_]+", item.lower())
        names |= {w for w in words if w not in _RELATIONS and w not in ("the", "a", "an")}
    return names


def scene_and_library_objects(scene: Mapping[str, Sequence[str]], library: SkillLibrary) -> set[str]:
    """Every object name scene memory mentions plus what the library's skills act on."""
    objects = objects_in_contents(item for items in scene.values() for item in items)
    for skill in library.vla:
        objects |= set(skill.objects)
    return objects


def _whereabouts(scene: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Object -> the one location scene memory puts it at (objects at two are left out)."""
    places: dict[str, set[str]] = {}
    for place, items in scene.items():
        for name in objects_in_contents(items):
            places.setdefault(name, set()).add(place)
    return {name: next(iter(at)) for name, at in places.items() if len(at) == 1}


def scene_now(scene: Mapping[str, Sequence[str]], observed: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Scene memory as the observations since the last plan leave it: an observed location
    holds what was seen there (a cover's hidden objects kept by executive.with_hidden); an
    object seen somewhere is no longer where memory put it elsewhere."""
    seen = {item.split()[0] for items in observed.values() for item in items if item.split()}
    now = {
        place: tuple(observed[place])
        if place in observed
        else tuple(i for i in items if i.split() and i.split()[0] not in seen)
        for place, items in scene.items()
    }
    now.update({place: tuple(items) for place, items in observed.items() if place not in now})
    return now


_UNDER = re.compile(r"^\s*([a-z0-9_]+)\s+under\s+(?:the\s+)?([a-z0-9_]+)\s*$")


def _covers(scene: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Object -> the cover scene memory puts it under ("carrot under pink_cover")."""
    found = (_UNDER.match(item.lower()) for items in scene.values() for item in items)
    return {m.group(1): m.group(2) for m in found if m is not None}


def preferences_path(configured: str = "") -> Path:
    """`configured`, else `<$CARRYON_CONFIG_DIR or ./config>/planner/preferences.yaml`."""
    return config_path(configured, "planner", "preferences.yaml")


def load_preference_rules(path: Path) -> Taxonomy:
    """config/planner/preferences.yaml: the kinds, diets and exact rules (core/taxonomy.py)."""
    return load_taxonomy(path)


def preference_texts(facts: Iterable[tuple[str, str, str]]) -> list[str]:
    """What the taxonomy reads of each (entity, key, value) fact: "allergy food: peanuts"."""
    return [f"{entity.replace('_', ' ')} {key.replace('_', ' ')}: {value}".strip() for entity, key, value in facts]


def planning_facts(
    *,
    request: str,
    scene: Mapping[str, Sequence[str]],
    library: SkillLibrary,
    user_facts: Iterable[str] = (),
    foreign_facts: Iterable[str] = (),
    other_users: Iterable[str] = (),
    pending_observations: Mapping[str, tuple[str, ...]] | None = None,
    preference_rules: Taxonomy | None = None,
    preferences: Iterable[str] | None = None,
    remembered: Iterable[Remembered] = (),
    knowledge: FoodKnowledge | None = None,
    confirmations: Iterable[Confirmation] = (),
) -> PlanningFacts:
    """Objects: everything scene memory mentions plus what the library's skills act on;
    locations: scene memory's named locations. `preferences`: the user's facts as the
    taxonomy reads them (preference_texts; default: their values), and the request's own
    clauses (`request_wishes`); what they rule out is every object and library instruction
    (read as a phrase) that is of an excluded kind;
    `remembered`: the user's facts that bear on the request (context.relevant_facts).
    With `knowledge` (the curated food knowledge) the constraints are settled object by
    object (core/constraints.py): ruled out, or unsettled (the user is asked first);
    `confirmations`: what users said about objects.
    Where things are and what is under which cover are read from scene memory as
    `pending_observations` leave it (scene_now); `gone`: what memory placed at a location
    looked at since, and no observation shows anywhere."""
    objects = scene_and_library_objects(scene, library)
    user_facts = tuple(user_facts)
    names = {*objects, *(i.lower() for i in library.instructions)}
    said = (*(user_facts if preferences is None else preferences), *request_wishes(request, scene))
    observed = dict(pending_observations or {})
    now = scene_now(scene, observed)  # what was seen since the last plan is the freshest memory
    whereabouts = _whereabouts(now)
    remembered_at = _whereabouts(scene)
    gone = {o for o, place in remembered_at.items() if place in observed and o not in whereabouts}
    stated = stated_moves(request, whereabouts, now)  # and the user's word fresher still
    rulings = _rulings(
        objects, library, said, preference_rules, knowledge=knowledge, confirmations=confirmations, names=names
    )
    return PlanningFacts(
        request=request,
        instructions=library.instructions,
        objects=frozenset(objects),
        locations=frozenset(scene),
        user_facts=frozenset(user_facts),
        foreign_facts=frozenset(foreign_facts),
        other_users=frozenset(u.lower() for u in other_users if u),
        pending_observations=observed,
        ruled_out=rulings[0],
        unsettled=rulings[1],
        whereabouts={**whereabouts, **stated},
        skill_objects={skill.instruction: skill.objects for skill in library.vla if skill.objects},
        covers=_covers(now),
        known_covers=frozenset(_covers(scene).values()) | frozenset(_covers(now).values()),
        gone=frozenset(gone),
        in_scene=frozenset(o for items in (*scene.values(), *observed.values()) for o in objects_in_contents(items)),
        stated=stated,
        remembered=tuple(remembered),
    )


def _rulings(
    objects: set[str],
    library: SkillLibrary,
    said: Sequence[str],
    rules: Taxonomy | None,
    *,
    knowledge: FoodKnowledge | None,
    confirmations: Iterable[Confirmation],
    names: set[str],
) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """PlanningFacts' ruled_out and unsettled (only with the food knowledge)."""
    if rules is None:
        return {}, {}
    if knowledge is None:
        return ruled_out(names, said, rules), {}
    handled = {i.lower(): handled_objects(i, objects, library) for i in library.instructions}
    vessels = {o for o in objects if " ".join(tokens(o)) in knowledge.vessels}
    serving = {i for i, found in handled.items() if set(found) & vessels or _pours(i)}
    settled = settle(
        objects,
        handled,
        read_constraints(said, rules, knowledge),
        taxonomy=rules,
        knowledge=knowledge,
        serving=serving,
        confirmations=confirmations,
    )
    return settled.ruled_out, settled.unsettled


def handled_objects(instruction: str, objects: Iterable[str], library: SkillLibrary) -> tuple[str, ...]:
    """The objects an instruction handles: those its skill declares, else those it names."""
    declared = next((s.objects for s in library.vla if s.instruction == instruction and s.objects), None)
    return tuple(declared) if declared else tuple(named_in(instruction, sorted(objects)))


def _pours(instruction: str) -> bool:
    """An instruction that serves what it handles whatever it goes into ("pour", "serve")."""
    return bool({"pour", "serve", "feed", "hand"} & set(tokens(instruction)))


def food_knowledge_path(configured: str = "") -> Path:
    """`configured`, else `<$CARRYON_CONFIG_DIR or ./config>/planner/food_knowledge.yaml`."""
    return config_path(configured, "planner", "food_knowledge.yaml")
