"""Reading config/planner/food_knowledge.yaml (core/knowledge.py says what it means),
checked: every kind an entry names is defined, every section has the shape it needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from carryon_common.core.config import read_yaml
from carryon_common.core.errors import ConfigError
from carryon_planner.core.knowledge import ANY, FoodEntry, FoodKnowledge, KindSpec
from carryon_planner.core.words import tokens


def _strings(raw: Any, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
        raise ConfigError(f"{where}: expected a list of strings")
    return tuple(x.strip().lower() for x in raw)


def load_food_knowledge(path: Path) -> FoodKnowledge:
    """config/planner/food_knowledge.yaml, checked: every kind an entry names is defined."""
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict) or not isinstance(raw.get("kinds"), dict) or not isinstance(raw.get("foods"), dict):
        raise ConfigError(f"{path}: expected a mapping with `kinds` and `foods`")
    kinds: dict[str, KindSpec] = {}
    for name, given in raw["kinds"].items():
        spec = given or {}
        if not isinstance(spec, dict):
            raise ConfigError(f"{path}: kinds.{name}: expected a mapping (aka, implies, note)")
        kinds[str(name)] = KindSpec(
            str(name),
            _strings(spec.get("aka"), f"{path}: kinds.{name}.aka"),
            _strings(spec.get("implies"), f"{path}: kinds.{name}.implies"),
            str(spec.get("note", "")),
            bool(spec.get("separable", False)),
            _strings(spec.get("free_words"), f"{path}: kinds.{name}.free_words"),
            bool(spec.get("dose_dependent", False)),
        )
    known = set(kinds) | {ANY}
    foods: list[tuple[FoodEntry, tuple[str, ...]]] = []
    for name, given in raw["foods"].items():
        spec = given or {}
        where = f"{path}: foods.{name}"
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: expected a mapping (is, may, free_of, aka, note)")
        entry = FoodEntry(
            " ".join(tokens(str(name))),
            frozenset(_strings(spec.get("is"), f"{where}.is")),
            frozenset(_strings(spec.get("may"), f"{where}.may")),
            frozenset(_strings(spec.get("free_of"), f"{where}.free_of")),
            str(spec.get("note", "")),
        )
        unknown = (entry.is_ | entry.may | entry.free_of) - known
        if unknown:
            raise ConfigError(f"{where}: unknown kind(s) {sorted(unknown)} (define them under `kinds`)")
        foods.append((entry, _strings(spec.get("aka"), f"{where}.aka")))
    for spec in kinds.values():
        if set(spec.implies) - set(kinds):
            raise ConfigError(
                f"{path}: kinds.{spec.name}.implies names undefined {sorted(set(spec.implies) - set(kinds))}"
            )
    diets = raw.get("diets") or {}
    if not isinstance(diets, dict):
        raise ConfigError(f"{path}: diets: expected a mapping (diet -> kinds it rules out)")
    parsed_diets = {str(d).lower(): _strings(v, f"{path}: diets.{d}") for d, v in diets.items()}
    substitutes = raw.get("substitutes") or {}
    if not isinstance(substitutes, dict):
        raise ConfigError(f"{path}: substitutes: expected a mapping (words, in_place_of)")
    in_place_of = _strings(substitutes.get("in_place_of"), f"{path}: substitutes.in_place_of")
    if set(in_place_of) - set(kinds):
        raise ConfigError(f"{path}: substitutes.in_place_of names undefined {sorted(set(in_place_of) - set(kinds))}")
    knowledge = FoodKnowledge(
        kinds,
        foods,
        not_food=_strings(raw.get("not_food"), f"{path}: not_food"),
        vessels=_strings(raw.get("vessels"), f"{path}: vessels"),
        diets=parsed_diets,
        describing=_strings(raw.get("describing_words"), f"{path}: describing_words"),
        substitutes=_strings(substitutes.get("words"), f"{path}: substitutes.words"),
        in_place_of=in_place_of,
    )
    for word in _strings(substitutes.get("words"), f"{path}: substitutes.words"):
        if not _names_a_food(knowledge, word):
            raise ConfigError(f"{path}: substitutes.words: '{word}' is no food (give it an entry under `foods`)")
    _check_names(path, raw, knowledge, foods)
    return knowledge


def _names_a_food(knowledge: FoodKnowledge, phrase: str) -> bool:
    reading = knowledge.read(phrase)
    return len(reading.foods) == 1 and not reading.unplaced


def _check_names(
    path: Path, raw: dict[str, Any], knowledge: FoodKnowledge, foods: list[tuple[FoodEntry, tuple[str, ...]]]
) -> None:
    """An entry's other name that names a kind ("seafood paella" under paella) must hold it
    for certain, since a reader of the name would take it to; or it is listed under
    `names_that_mislead` with why ("lamb's lettuce" holds no lamb)."""
    misleading = raw.get("names_that_mislead") or {}
    if not isinstance(misleading, dict):
        raise ConfigError(f"{path}: names_that_mislead: expected a mapping (name -> why it misleads)")
    allowed = {" ".join(tokens(str(name))) for name in misleading}
    for name in sorted(allowed):
        if not _names_a_food(knowledge, name):
            raise ConfigError(f"{path}: names_that_mislead: '{name}' names no food entry")
    for entry, aka in foods:
        held = knowledge.closure(entry.is_) | knowledge.kinds_in(entry.name)
        for other in aka:
            named = knowledge.kinds_in(other) - held - knowledge.read(other).freed
            if named and " ".join(tokens(other)) not in allowed:
                raise ConfigError(
                    f"{path}: foods.{entry.name}: '{other}' names {', '.join(sorted(named))}, which {entry.name} "
                    "does not hold for certain: give it an entry of its own, or list it under names_that_mislead"
                )
