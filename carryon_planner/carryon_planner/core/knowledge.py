"""Food knowledge with provenance: is X (or does X contain) kind K? *yes*, *no* or *unknown*,
and where the answer came from.

The planner must never hand a user what their diet, allergy or stated wish might break, and
must not refuse what it knows to be fine. A word list cannot do both: it knows only the
words in it, and says nothing about the rest. This module answers from, in order:

1. **What the user said** about the object (`Confirmation`: "the house dressing has no
   mustard"), attributed to that user.
2. **The curated food knowledge** (config/planner/food_knowledge.yaml): several hundred
   foods, each with the kinds its standard recipe always holds (`is`), the kinds its common
   variants add (`may`, or `"*"` for a dish that could hold anything: a stew, leftovers), and
   what its name promises it lacks (`free_of`). A kind an entry does not list is a definite
   *no* for that food: entries are complete.
3. **What the name says.** "sesame-free", "without gluten", "dairy free" free the food of
   those kinds; a diet word ("vegan pesto", "halal sausage") frees it of what the diet rules
   out (`diets`); a plant food named right before a dish ("jackfruit carnitas", "seitan
   gyros": `substitutes`) takes the place of that dish's meat and fish, unless the dish's
   own name says meat ("tofu chicken") or the dish could hold anything ("tofu stew"). A
   word the knowledge cannot place (a brand, a dish nobody listed) makes every kind
   *unknown*: it might be an ingredient.
4. **The taxonomy** and **an LLM's classification** may only say *yes*: they can rule a
   food out, never clear it (`FoodKnowledge.contains(..., also_yes=...)`).

Whatever none of them settles is *unknown*, and unknown means ask (core/ask_back.py).
Kinds form a small closed vocabulary (the EU's 14 regulated allergens and the diets'
kinds); `implies` links a kind to what it always is or holds (pork -> meat, milk ->
lactose). A constraint on a broad kind is broken by any narrower one (a vegetarian and pork);
a constraint on a narrow kind is *unknown* for a food that holds only the broad one (a pork
avoider and "meat").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from carryon_common.core.config import read_yaml
from carryon_common.core.errors import ConfigError
from carryon_planner.core.words import Phrases, reachable, singular_forms, tokens

ANY = "*"  # in `may`: the food could hold any kind
_FREE_AFTER = ("free",)  # "gluten free bread"
_FREE_BEFORE = ("no", "without", "non", "zero")  # "no sugar cola", "without egg"


class Answer(StrEnum):
    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Verdict:
    """The answer for one object and one kind, and where it came from."""

    answer: Answer
    kind: str
    source: str
    only_may: bool = False  # unknown only because a curated entry says a variant may hold it


@dataclass(frozen=True)
class Confirmation:
    """What a user said about an object: it holds `kind` (True) or not (False)."""

    obj: str
    kind: str
    holds: bool
    user: str


@dataclass(frozen=True)
class KindSpec:
    name: str
    aka: tuple[str, ...] = ()
    implies: tuple[str, ...] = ()
    note: str = ""
    separable: bool = False  # can be taken out of what implies it: lactose-free milk is still milk
    free_words: tuple[str, ...] = ()  # besides its name, what "X-free" may say of it ("dairy-free")
    dose_dependent: bool = False  # an intolerance: a little is tolerated (a `may` does not break it)


@dataclass(frozen=True)
class FoodEntry:
    name: str
    is_: frozenset[str] = frozenset()
    may: frozenset[str] = frozenset()  # ANY: anything
    free_of: frozenset[str] = frozenset()
    note: str = ""


@dataclass(frozen=True)
class NameReading:
    """What a name is made of: the food entries found in it, the kinds it says it is free
    of, the words nothing could place, and whether it is food at all (None: not known)."""

    foods: tuple[FoodEntry, ...]
    freed: frozenset[str]
    unplaced: tuple[str, ...]
    food: bool | None


class FoodKnowledge:
    """The curated food knowledge (config/planner/food_knowledge.yaml)."""

    def __init__(
        self,
        kinds: Mapping[str, KindSpec],
        foods: Iterable[tuple[FoodEntry, tuple[str, ...]]],
        *,
        not_food: Iterable[str] = (),
        vessels: Iterable[str] = (),
        diets: Mapping[str, Iterable[str]] | None = None,
        describing: Iterable[str] = (),
        substitutes: Iterable[str] = (),
        in_place_of: Iterable[str] = (),
    ) -> None:
        self.kinds = dict(kinds)
        self._kind_names = Phrases()
        # What "X-free" frees: a kind's own name or its free_words, never a member of it
        # ("wheat-free rye crackers" still hold gluten; "almond-free" is not tree-nut-free).
        self._free_names = Phrases()
        for spec in self.kinds.values():
            for phrase in (spec.name, *spec.aka):
                self._kind_names.add(phrase, spec.name)
            for phrase in (spec.name, *spec.free_words):
                self._free_names.add(phrase, spec.name)
        self._foods = Phrases()
        self.entries: dict[str, FoodEntry] = {}
        for entry, aka in foods:
            self.entries[entry.name] = entry
            for phrase in (entry.name, *aka):
                self._foods.add(phrase, entry)
        self._not_food = Phrases()
        for phrase in not_food:
            self._not_food.add(phrase, True)
        self.vessels = frozenset(" ".join(tokens(v)) for v in vessels)
        # Words that say how a food is made or served (grilled, warm, my), never what it holds.
        self.describing = frozenset(w for d in describing for w in tokens(d))
        self._diets = Phrases()
        self.diets: dict[str, frozenset[str]] = {}
        for diet, ruled in (diets or {}).items():
            named = frozenset(k for item in ruled for k in self.kinds_named(item))
            self.diets[diet] = named
            self._diets.add(diet, named)
        self._parents = {name: set(spec.implies) for name, spec in self.kinds.items()}
        self._children: dict[str, set[str]] = {name: set() for name in self.kinds}
        for name, spec in self.kinds.items():
            for parent in spec.implies:
                self._children.setdefault(parent, set()).add(name)
        # Plant foods that take a dish's meat's place when named right before it ("seitan gyros").
        self.substitutes = frozenset(e.name for phrase in substitutes for e in self._foods.at(tokens(phrase), 0)[1])
        self.replaced = self._freed(in_place_of)

    # -- kinds -----------------------------------------------------------------------------
    def kinds_named(self, text: str) -> set[str]:
        """The kinds a word or phrase names ("tree nuts", "shellfish" (two kinds), "lácteos"
        is not matched: accents are dropped by `tokens`): empty when it names none whole."""
        words = tokens(text)
        size, found = self._kind_names.at(words, 0)
        return set(found) if size and size == len(words) else set()

    def kinds_in(self, text: str) -> set[str]:
        """Every kind named anywhere in `text` ("allergic to sesame and mustard")."""
        words, i, out = tokens(text), 0, set()
        while i < len(words):
            size, found = self._kind_names.at(words, i)
            out |= set(found)
            i += size or 1
        return out

    def closure(self, kinds: Iterable[str]) -> set[str]:
        """The kinds and all they imply (pork -> pork, meat)."""
        return reachable(kinds, self._parents)

    def narrower(self, kind: str) -> set[str]:
        """The kinds that imply `kind`, at any depth (meat -> pork, beef, ...)."""
        return reachable(self._children.get(kind, ()), self._children)

    def _freed(self, kinds: Iterable[str]) -> frozenset[str]:
        """What "free of `kinds`" frees: the kinds, the narrower ones (meat-free is pork-free;
        lactose-free milk is still milk: lactose is `separable`), and every kind only they
        imply (dairy-free is lactose-free; pork-free is not meat-free)."""
        freed = set(kinds)
        for kind in list(freed):
            spec = self.kinds.get(kind)
            if spec is None or not spec.separable:
                freed |= self.narrower(kind)
        changed = True
        while changed:
            changed = False
            for kind in self.kinds:
                sources = {k for k, parents in self._parents.items() if kind in parents}
                if kind not in freed and sources and sources <= freed:
                    freed.add(kind)
                    changed = True
        return frozenset(freed)

    # -- names -----------------------------------------------------------------------------
    def read(self, name: str) -> NameReading:
        """The foods, freed kinds and unplaced words of an object's name."""
        words = tokens(name)
        freed: set[str] = set()
        used = [False] * len(words)
        # "X free" / "no X" / "without X": X names kinds the food lacks.
        for i in range(len(words)):
            size, found = self._free_names.at(words, i)
            if not size:
                continue
            after = i + size < len(words) and words[i + size] in _FREE_AFTER
            before = i > 0 and words[i - 1] in _FREE_BEFORE
            if after or before:
                freed |= set(found)
                for j in range(i - int(before), i + size + int(after)):
                    used[j] = True
        # A diet word: "vegan pesto" lacks what veganism rules out.
        for i in range(len(words)):
            size, found = self._diets.at(words, i)
            if size and not any(used[i : i + size]):
                for ruled in found:
                    freed |= ruled
                for j in range(i, i + size):
                    used[j] = True
        foods: list[FoodEntry] = []
        unplaced: list[str] = []
        head = ""  # what the last word belongs to: the head of a compound name ("nibbles dish" is a dish)
        substitute: tuple[int, int] | None = None  # where the plant food just read stands
        i = 0
        for part, size, found in self._parts(words, used):
            if part == "food":
                entries = found
                if substitute is not None and substitute[1] == i:
                    plant = " ".join(words[substitute[0] : i])
                    entries = [self._in_place(e, plant, words[i : i + size]) for e in found]
                foods.extend(entries)
                substitute = (i, i + size) if any(e.name in self.substitutes for e in found) else None
            elif part == "word":
                unplaced.append(words[i])
            if part != "skip":
                head = part
            i += size
        if head == "thing":  # a dish, a cup, a bin named after what it holds is still no food
            return NameReading((), self._freed(freed), (), False)
        food: bool | None = True if foods else None
        if not foods and not unplaced and words:
            food = False if any(self._not_food.at(words, i)[0] for i in range(len(words))) else None
        return NameReading(tuple(foods), self._freed(freed), tuple(unplaced), food)

    def _parts(self, words: list[str], used: list[bool]) -> list[tuple[str, int, list[Any]]]:
        """How `words` divide into known names: the division that leaves the fewest words
        unplaced, then has the fewest parts, then takes the longer name first ("quorn sausage
        roll" is quorn + sausage roll, not quorn sausage + an unknown "roll"; "tea towel" is
        no tea). Parts: ("food", size, entries), ("thing", size, _), ("word", 1, _): a word
        nothing places, ("skip", 1, _): a describing word or one the name's freeing used."""
        best: list[tuple[tuple[int, int], list[tuple[str, int, list[Any]]]]] = [((0, 0), [])] * (len(words) + 1)
        for i in range(len(words) - 1, -1, -1):
            options: list[tuple[str, int, list[Any]]] = []
            if used[i]:
                options.append(("skip", 1, []))
            else:
                options += [("thing", size, found) for size, found in self._not_food.every(words, i)]
                options += [
                    ("food", size, found) for size, found in self._foods.every(words, i) if not any(used[i : i + size])
                ]
                describes = any(form in self.describing for form in singular_forms(words[i]))  # "slices"
                options.append(("skip" if describes else "word", 1, []))
            choice: tuple[tuple[int, int], list[tuple[str, int, list[Any]]]] | None = None
            for option in options:
                (unplaced, parts), rest = best[i + option[1]]
                cost = (unplaced + (option[0] == "word"), parts + (option[0] != "skip"))
                if choice is None or cost < choice[0]:
                    choice = (cost, [option, *rest])
            assert choice is not None
            best[i] = choice
        return best[0][1]

    def _in_place(self, entry: FoodEntry, plant: str, named: list[str]) -> FoodEntry:
        """`entry` with `plant` in the place of its meat and fish: "seitan gyros" holds no meat.
        Not where the dish's own name says meat ("tofu chicken") or the dish could hold
        anything ("tofu stew": the tofu may be beside pork)."""
        if ANY in entry.may or self.kinds_in(" ".join(named)) & self.replaced:
            return entry
        if not (entry.is_ | entry.may) & self.replaced:
            return entry
        return FoodEntry(
            f"{plant} {entry.name}",
            entry.is_ - self.replaced,
            entry.may - self.replaced,
            entry.free_of,
            f"{entry.name} with {plant} in place of its meat",
        )

    def is_food(self, name: str) -> bool | None:
        """True: a known food; False: a known non-food object (a plate, a towel); None:
        nothing says (treat as possibly food where it is served)."""
        return self.read(name).food

    def contains(self, name: str, kind: str, confirmations: Iterable[Confirmation] = ()) -> Verdict:
        """Does `name` hold `kind`? From what users said, then the curated knowledge and the
        name itself (see the module)."""
        spoken = name.replace("_", " ")
        for said in confirmations:
            if " ".join(tokens(said.obj)) == " ".join(tokens(name)) and said.kind in self.closure([kind]) | {kind}:
                answer = Answer.YES if said.holds else Answer.NO
                return Verdict(answer, kind, f"{said.user} said {spoken} {'has' if said.holds else 'has no'} {kind}")
        reading = self.read(name)
        if kind in reading.freed:
            return Verdict(Answer.NO, kind, f"its name says {spoken} is free of {kind}")
        for entry in reading.foods:
            holds = self.closure(entry.is_) - self._freed(entry.free_of) - reading.freed
            if kind in holds:
                return Verdict(Answer.YES, kind, _cite(entry, f"{entry.name} is {kind}"))
        doubts: list[str] = []
        only_may = True
        for entry in reading.foods:
            if ANY in entry.may:
                doubts.append(f"{entry.name} could hold anything")
                only_may = False
            elif kind in self.closure(entry.may) or self.narrower(kind) & (entry.may | entry.is_):
                doubts.append(f"{entry.name} may hold {kind}")
            elif kind in self.narrower_than_any(entry.is_ | entry.may):
                doubts.append(f"{entry.name} holds {', '.join(sorted(self.broader_in(kind, entry.is_ | entry.may)))}")
                only_may = False
        if reading.unplaced:
            doubts.append(f"nothing is known about '{' '.join(reading.unplaced)}'")
        if not reading.foods and not reading.unplaced:
            doubts.append(f"nothing is known about {spoken}")
        if doubts:
            only_may = only_may and not reading.unplaced and bool(reading.foods)
            return Verdict(Answer.UNKNOWN, kind, "; ".join(doubts), only_may)
        names = ", ".join(e.name for e in reading.foods)
        return Verdict(Answer.NO, kind, f"food knowledge: {names} holds no {kind}")

    def narrower_than_any(self, kinds: Iterable[str]) -> set[str]:
        """Kinds narrower than one of `kinds` (a food of "meat" may be pork)."""
        out: set[str] = set()
        for kind in kinds:
            out |= self.narrower(kind)
        return out

    def broader_in(self, kind: str, kinds: Iterable[str]) -> set[str]:
        return {k for k in kinds if kind in self.narrower(k)}


def _cite(entry: FoodEntry, said: str) -> str:
    return f"food knowledge: {said}" + (f" ({entry.note})" if entry.note else "")


# -- reading config/planner/food_knowledge.yaml, checked: every kind an entry names is defined,
# every section has the shape it needs ------------------------------------------------------
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
