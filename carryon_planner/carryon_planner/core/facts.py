"""What the validator checks a plan against, gathered from memory and the skill library."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from carryon_common.core.config import config_path, read_yaml
from carryon_common.core.errors import ConfigError
from carryon_common.core.skills import SkillLibrary
from carryon_planner.core.validator import PlanningFacts

_RELATIONS = {"under", "in", "on", "at", "inside", "near", "beside", "behind"}


def objects_in_contents(items: Iterable[str]) -> set[str]:
    """Object names in scene-memory entries: "carrot under pink_cover" -> {carrot, pink_cover}."""
    names: set[str] = set()
    for item in items:
        words = re.findall(r"[a-z0-9_]+", item.lower())
        names |= {w for w in words if w not in _RELATIONS and w not in ("the", "a", "an")}
    return names


def preferences_path(configured: str = "") -> Path:
    """`configured`, else `<$CARRYON_CONFIG_DIR or ./config>/planner/preferences.yaml`."""
    return config_path(configured, "planner", "preferences.yaml")


def load_preference_rules(path: Path) -> dict[str, tuple[str, ...]]:
    """`rules_out` of config/planner/preferences.yaml: preference value -> object names."""
    raw = read_yaml(path) or {}
    table = raw.get("rules_out", {}) if isinstance(raw, dict) else None
    if not isinstance(table, dict) or not all(isinstance(v, list) for v in table.values()):
        raise ConfigError(f"{path}: expected 'rules_out: {{preference: [object, ...]}}'")
    return {str(k).lower(): tuple(str(o) for o in v) for k, v in table.items()}


def ruled_out_objects(user_facts: Iterable[str], rules: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Objects the user's fact values rule out (object -> the preference)."""
    out: dict[str, str] = {}
    for value in user_facts:
        for obj in rules.get(value.strip().lower(), ()):
            out.setdefault(obj, value.strip())
    return out


def planning_facts(
    *,
    request: str,
    scene: Mapping[str, Sequence[str]],
    library: SkillLibrary,
    user_facts: Iterable[str] = (),
    foreign_facts: Iterable[str] = (),
    other_users: Iterable[str] = (),
    pending_observations: Mapping[str, tuple[str, ...]] | None = None,
    preference_rules: Mapping[str, Sequence[str]] | None = None,
) -> PlanningFacts:
    """Objects: everything scene memory mentions plus what the library's skills act on;
    locations: scene memory's named locations."""
    objects = objects_in_contents(item for items in scene.values() for item in items)
    for skill in library.vla:
        objects |= set(skill.objects)
    user_facts = tuple(user_facts)
    return PlanningFacts(
        request=request,
        instructions=library.instructions,
        objects=frozenset(objects),
        locations=frozenset(scene),
        user_facts=frozenset(user_facts),
        foreign_facts=frozenset(foreign_facts),
        other_users=frozenset(u.lower() for u in other_users if u),
        pending_observations=dict(pending_observations or {}),
        ruled_out=ruled_out_objects(user_facts, preference_rules or {}),
    )
