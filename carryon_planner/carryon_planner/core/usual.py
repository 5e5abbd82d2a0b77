"""What memory says a request acts on, read against a plan (issue 20).

Skill libraries come in families: "put the ham on the bread", "put the cheese on the
bread", ... are one instruction with a slot, "put the {} on the bread". The 1.5B model
mostly picks the family right (it makes the sandwich, it packs the bag) and the slot's
fillers wrong: it leaves out the tofu the user's memory names, or packs all sixteen
things the library offers. What can be read without the model is read here:

* `usual_items`: the user's facts that bear on the request (context.relevant_facts) name
  objects of one family; when the plan works in that family, it should act on exactly
  those, less what the preferences rule out. A request that names an object of the
  family chooses for itself ("water instead of my usual", "without cheese this time"):
  that stays the model's decision.
* `cover_to_open`: scene memory puts the target under a cover and the library can open
  that cover: the plan opens it first.
* `stated_moves`: what the request says about where a remembered object is now ("The keys
  are on the sofa now"): the plan records it (update_scene move_item), and the planner looks
  for the object there (core/facts.py).
* `crowded_family`: the plan fills most of a large family's slots though the request
  names none of them: that is copying the library, not choosing.

The validator turns each into a named violation; core/mend.py mends them (a copied
family by asking the user which ones: repair rounds did not get the 1.5B model to choose).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carryon_planner.core.plan import Plan, PlannedSubtask, UpdateScene, ancestors
from carryon_planner.core.steps import named_in

if TYPE_CHECKING:  # the validator imports this module
    from carryon_planner.core.validator import PlanningFacts

_ALL = re.compile(r"\b(all|every|everything|whole)\b", re.IGNORECASE)
_USUAL = re.compile(r"\b(?:my|the)\s+(?:usual|regular|normal)\b|\bas\s+usual\b", re.IGNORECASE)
CROWDED_FAMILY = 6  # a family this large or larger, filled past half by a plan, is "crowded"
# What a clause must and must not hold to state where an object is now (`stated_moves`).
_ORDER = re.compile(
    r"^(?:please\s+)?(?:put|bring|take|move|place|get|carry|tidy|give|fetch|hand|could|can|would|will|is|are|where)\b"
)
_NEGATED = re.compile(r"\b(?:not|no longer|any ?more)\b|n't\b")
_STATES = re.compile(r"\b(?:is|are|moved|left|put|now|sits|lies|lives)\b|'s\b|'re\b")
_PRONOUN = re.compile(r"\b(?:it|they|them)\b")


@dataclass(frozen=True)
class Remembered:
    """A fact of the user's that bears on the request: its label ("sandwich.filling: ham
    and cheese"), the objects its value names, and whether the request names its entity
    or key (else it is one of the facts that name objects: the request named none)."""

    label: str
    objects: tuple[str, ...]
    named: bool = True


def slot(instruction: str, names: Iterable[str]) -> tuple[str, str] | None:
    """("put the {} on the bread", "ham") for "put the ham on the bread": the instruction
    with the first known name it mentions as the slot, and that name (None: it names none)."""
    found = named_in(instruction, list(names))
    if not found:
        return None
    text = instruction.lower()
    match = re.search(rf"\b{re.escape(found[0].replace('_', ' '))}\b", text)
    assert match is not None  # named_in found it there
    return f"{text[: match.start()]}{{}}{text[match.end() :]}", found[0]


def _slots(instructions: Sequence[str], names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """Instruction -> (family, the object in its slot), for the library's instructions with one."""
    return {ins: found for ins in instructions if (found := slot(ins, names)) is not None}


def _named_objects(remembered: Sequence[Remembered]) -> set[str]:
    """The objects the facts the request names say it uses."""
    return {o for r in remembered if r.named for o in r.objects}


def _spoken(name: str) -> str:
    return name.replace("_", " ").lower()


def _named_by(text: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(_spoken(name))}s?\b", text.lower().replace("_", " ")) is not None


@dataclass(frozen=True)
class Usual:
    """What memory says the plan acts on in `family`: `wanted` (object -> its instruction,
    in the facts' order) and `extra`/`missing`, the plan's subtask ids that act on what
    memory does not name and the wanted objects it leaves out."""

    facts: tuple[str, ...]
    family: str
    wanted: Mapping[str, str]
    extra: tuple[str, ...]
    missing: tuple[str, ...]
    filled: int  # how many of the family's slots the plan fills
    size: int  # how many the library has
    named: bool = False  # the request names every fact this comes from ("Make me a sandwich": sandwich.filling)

    @property
    def chosen(self) -> bool:
        """Whether the plan chose within the family (at most half of it) rather than copied
        it: only a choice is mended; a copy is put to the model or the user (core/choose.py)."""
        return 2 * self.filled <= self.size


def usual_items(
    subtasks: Sequence[PlannedSubtask],
    remembered: Sequence[Remembered],
    *,
    instructions: Sequence[str],
    names: Iterable[str],
    request: str,
    ruled_out: Iterable[str] = (),
) -> Usual | None:
    """The gap between what the plan acts on and what memory says the request uses; None
    when memory names nothing for a family the plan works in, or when it is ambiguous
    (two facts the request does not name, both of the plan's family: "Heading to the pool"
    with habits for swimming and for work)."""
    names = sorted(set(names))
    slots = _slots(instructions, names)
    in_plan = [s for s in subtasks if s.kind == "vla" and s.instruction in slots]
    touched = {slots[s.instruction][0] for s in in_plan}
    used = {slots[s.instruction][1] for s in in_plan}
    # a plan that handles a family's base ("put the bread on the plate") works in it too
    touched |= {f for f, _ in slots.values() if any(b in used for b in named_in(f.replace("{}", ""), names))}
    pool = [r for r in remembered if r.objects]
    pool = [r for r in pool if r.named] or pool
    chosen: list[tuple[Remembered, str, dict[str, str]]] = []
    for fact in pool:
        offered = {obj: ins for ins, (fam, obj) in slots.items() for o in fact.objects if o == obj}
        families = {slots[ins][0] for ins in offered.values()}
        if len(families) == 1 and (family := families.pop()) in touched:
            ordered = {o: offered[o] for o in fact.objects if o in offered}
            chosen.append((fact, family, ordered))
    if not chosen or len({family for _, family, _ in chosen}) != 1 or (len(chosen) > 1 and not chosen[0][0].named):
        return None
    family = chosen[0][1]
    if any(_named_by(request, obj) for fam, obj in slots.values() if fam == family):
        return None  # the request chooses for itself: "water instead of my usual", "without cheese"
    excluded = set(ruled_out)
    wanted = {o: i for _, _, offered in chosen for o, i in offered.items() if o not in excluded}
    named_all = {o for _, _, offered in chosen for o in offered}
    extra = tuple(
        s.id for s in in_plan if slots[s.instruction][0] == family and slots[s.instruction][1] not in named_all
    )
    acted = {slots[s.instruction][1] for s in in_plan if slots[s.instruction][0] == family}
    missing = tuple(o for o in wanted if o not in acted)
    if not extra and not missing:
        return None
    size = Counter(fam for fam, _ in slots.values())[family]
    named = all(fact.named for fact, _, _ in chosen)
    return Usual(tuple(fact.label for fact, _, _ in chosen), family, wanted, extra, missing, len(acted), size, named)


def cover_to_open(
    subtask: PlannedSubtask,
    by_id: Mapping[str, PlannedSubtask],
    *,
    covers: Mapping[str, str],
    instructions: Sequence[str],
    declared: Mapping[str, Sequence[str]],
    names: Iterable[str],
) -> tuple[str, str] | None:
    """(cover, the instruction that opens it) when scene memory puts `subtask`'s target
    under a cover the library can open and no subtask before it handles that cover."""
    cover = covers.get(subtask.target, "") if subtask.kind == "vla" else ""
    if not cover:
        return None
    names = sorted(set(names))
    opening = [i for i in instructions if list(declared.get(i, ())) == [cover] or named_in(i, names) == [cover]]
    if not opening:
        return None
    handled = {
        a
        for a, s in by_id.items()
        if cover in (s.target, *named_in(s.instruction, names)) and a in ancestors(subtask, by_id)
    }
    return None if handled else (cover, opening[0])


def stated_moves(request: str, whereabouts: Mapping[str, str], locations: Iterable[str]) -> dict[str, str]:
    """Object -> the location the request says it is at now, for objects scene memory puts
    somewhere else: "My keys are on the sofa now", "I moved my glasses from the desk to the
    kitchen counter", "The remote isn't on the sofa, it's on the bedside table". Orders
    ("Put the keys on the sofa"), questions and negated clauses state nothing."""
    places = sorted(set(locations))
    known = sorted(whereabouts)
    moves: dict[str, str] = {}
    last: list[str] = []
    for sentence in re.findall(r"[^.;!?]+[.;!?]?", request.lower()):
        if sentence.strip().endswith("?"):
            continue
        for clause in re.split(r",|\bbut\b|\band\b(?= (?:it|they|the|my)\b)", sentence):
            text = clause.strip().replace("_", " ")
            found = [n for n in named_in(text, known) if n not in places]
            subjects = found or (last if _PRONOUN.search(text) else [])
            last = found or last
            if not subjects or _ORDER.match(text) or _NEGATED.search(text) or not _STATES.search(text):
                continue
            where = [p for p in named_in(text, places) if p != whereabouts.get(subjects[0])]
            if len(subjects) == 1 and len(where) == 1:
                moves[subjects[0]] = where[-1]
    return {o: p for o, p in moves.items() if whereabouts.get(o) != p}


def recorded(op: object, item: str, place: str) -> bool:
    """Whether a memory operation records that `item` is at `place` now."""
    return isinstance(op, UpdateScene) and op.action == "move_item" and (op.item, op.location) == (item, place)


def repeats(subtask: PlannedSubtask, by_id: Mapping[str, PlannedSubtask]) -> bool:
    """Whether `subtask` is the subtask it directly follows, again (a small model's answer
    can run on, "observe counter" sixteen times)."""
    same = ("kind", "instruction", "target", "source", "destination", "condition")
    return any(
        d in by_id and all(getattr(by_id[d], k) == getattr(subtask, k) for k in same) for d in subtask.depends_on
    )


def crowded_family(
    subtasks: Sequence[PlannedSubtask],
    *,
    instructions: Sequence[str],
    names: Iterable[str],
    request: str,
    remembered: Sequence[Remembered] = (),
) -> tuple[str, int, int] | None:
    """(family, how many of its slots the plan fills, how many it has) for a plan that
    fills more than half of a family of at least CROWDED_FAMILY instructions, none of
    whose objects the request names ("pack my bag for work" answered with the whole
    shelf), or of a family of three or more where `remembered` facts the request names say
    which to use and the plan goes past them. None when the request asks for all of them."""
    if _ALL.search(request):
        return None
    names = sorted(set(names))
    slots = _slots(instructions, names)
    sizes = Counter(family for family, _ in slots.values())
    filled: dict[str, set[str]] = {}
    for s in subtasks:
        if s.kind == "vla" and s.instruction in slots:
            family, obj = slots[s.instruction]
            filled.setdefault(family, set()).add(obj)
    usual = _named_objects(remembered)
    for family, objects in filled.items():
        # a smaller family counts where the request names a fact that says which of it to use
        # and the plan goes past that ("Make me a sandwich": four fillings of four, memory says two)
        small = sizes[family] >= 3 and bool(objects & usual) and bool(objects - usual)
        crowded = (sizes[family] >= CROWDED_FAMILY or small) and 2 * len(objects) > sizes[family]
        if crowded and not any(_named_by(request, o) for o in objects):
            return family, len(objects), sizes[family]
    return None


def copied_beside(
    subtasks: Sequence[PlannedSubtask],
    *,
    instructions: Sequence[str],
    names: Iterable[str],
    request: str,
    remembered: Sequence[Remembered],
) -> tuple[str, tuple[str, ...]] | None:
    """(family, the plan's subtask ids in it) for a family of three or more the plan fills
    past half beside the family a fact the request names is about, though the request names
    none of its objects: "Make me a sandwich" answered with the sandwich and every drink.
    None when there is no such fact, or the family holds the other's base (the bread)."""
    names = sorted(set(names))
    slots = _slots(instructions, names)
    usual = _named_objects(remembered)
    asked = {family for family, obj in slots.values() if obj in usual}
    if not asked:
        return None
    bases = {b for family in asked for b in named_in(family.replace("{}", ""), names)}
    sizes = Counter(family for family, _ in slots.values())
    steps: dict[str, list[PlannedSubtask]] = {}
    for s in subtasks:
        if s.kind == "vla" and s.instruction in slots and slots[s.instruction][0] not in asked:
            steps.setdefault(slots[s.instruction][0], []).append(s)
    for family, in_family in steps.items():
        objects = {slots[s.instruction][1] for s in in_family}
        if sizes[family] < 3 or 2 * len(objects) <= sizes[family] or objects & bases:
            continue
        if not any(_named_by(request, o) for fam, o in slots.values() if fam == family):
            return family, tuple(s.id for s in in_family)
    return None


def missing_base(
    subtasks: Sequence[PlannedSubtask],
    *,
    instructions: Sequence[str],
    names: Iterable[str],
    remembered: Sequence[Remembered],
) -> tuple[str, str] | None:
    """(the instruction that sets out a family's base, the plan's first step in that family)
    where the plan works in the family a fact the request names is about without setting
    out what the family builds on: "put the bread on the plate" before "put the {} on the
    bread" for "Fix me my usual sandwich". None when the library has no single such step."""
    names = sorted(set(names))
    slots = _slots(instructions, names)
    usual = _named_objects(remembered)
    in_plan = [s for s in subtasks if s.kind == "vla" and s.instruction in slots]
    planned = {s.instruction for s in subtasks if s.kind == "vla"}
    for family in dict.fromkeys(slots[s.instruction][0] for s in in_plan):
        if not any(obj in usual for fam, obj in slots.values() if fam == family):
            continue
        bases = named_in(family.replace("{}", ""), names)
        setting = [ins for ins, (fam, obj) in slots.items() if obj in bases and fam != family]
        if len(setting) == 1 and setting[0] not in planned:
            return setting[0], next(s.id for s in in_plan if slots[s.instruction][0] == family)
    return None


def usual_unknown(request: str, remembered: Sequence[Remembered], names: Iterable[str]) -> bool:
    """Whether the request asks for the user's usual ("Bring me my usual snack"), names no
    object itself ("water instead of my usual" does), and their memory holds nothing that
    bears on it (a new user, or one whose facts name nothing): whatever is served is a guess."""
    if _USUAL.search(request) is None or any(r.objects for r in remembered):
        return False
    return not named_in(request.lower(), sorted(set(names)))


def problems(plan: Plan, facts: PlanningFacts) -> Iterator[tuple[str, str, str]]:
    """The validator's checks of this module: (check, message, subtask id) each."""
    subtasks = plan.subtasks
    if usual_unknown(facts.request, facts.remembered, facts.objects) and any(
        s.kind in ("vla", "control") for s in subtasks
    ):
        yield (
            "usual_known",
            "the user asks for their usual, but their memory holds nothing about it: do not guess; ask them "
            "what they would like",
            "",
        )
    for item, place in sorted(facts.stated.items()):
        if not any(recorded(op, item, place) for op in plan.memory_operations):
            yield (
                "stated_move_recorded",
                f"the user says the {_spoken(item)} is at {place} now: add update_scene move_item with item {item} "
                f"and location {place}",
                "",
            )
    names = sorted(facts.objects)
    gap = usual_items(
        subtasks,
        facts.remembered,
        instructions=facts.instructions,
        names=names,
        request=facts.request,
        ruled_out=facts.ruled_out,
    )
    if gap is not None and gap.chosen:  # a copied family is crowded_family's
        said = "; ".join(gap.facts)
        if gap.missing:
            left = ", ".join(_spoken(o) for o in gap.missing)
            yield "follows_memory", f"the user's memory says {said}: the plan leaves out {left}", ""
        for subtask_id in gap.extra:
            yield "follows_memory", f"the user's memory says {said}: this is not in it", subtask_id
    by_id = {s.id: s for s in subtasks}
    for subtask in subtasks:
        if repeats(subtask, by_id):
            yield "repeated_step", "the same step twice in a row", subtask.id
        found = cover_to_open(
            subtask,
            by_id,
            covers=facts.covers,
            instructions=facts.instructions,
            declared=facts.skill_objects,
            names=names,
        )
        if found is not None:
            cover, opening = found
            yield (
                "uncover_first",
                f"scene memory has {subtask.target} under {cover}: {opening!r} must come before",
                subtask.id,
            )
    base = missing_base(subtasks, instructions=facts.instructions, names=names, remembered=facts.remembered)
    if base is not None:
        yield "follows_memory", f"{base[0]!r} sets out what this step builds on: it comes first", base[1]
    beside = copied_beside(
        subtasks, instructions=facts.instructions, names=names, request=facts.request, remembered=facts.remembered
    )
    if beside is not None:
        for subtask_id in beside[1]:
            yield (
                "acts_on_what_is_needed",
                f"the request asks for none of '{beside[0].replace('{}', '...')}': leave this out",
                subtask_id,
            )
    crowded = crowded_family(
        subtasks, instructions=facts.instructions, names=names, request=facts.request, remembered=facts.remembered
    )
    if crowded is not None:
        family, filled, size = crowded
        yield (
            "acts_on_what_is_needed",
            f"the plan does {filled} of the library's {size} '{family.replace('{}', '...')}' steps, but the "
            "request names none of them: keep only the few it needs",
            "",
        )
