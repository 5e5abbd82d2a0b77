"""What the user's constraints rule out, settled object by object: *ruled out*, *unsettled*
(ask first) or fine.

A constraint is a fact of the user's (a diet, an allergy, a dislike) or a clause of the
request ("no mustard today"); the taxonomy reads it (core/taxonomy.py: negations, "allergic
to", "-free", "avoids", diets) into the kinds it rules out, and the food knowledge names
those kinds in its own vocabulary (core/knowledge.py: "shellfish" is crustaceans and
molluscs). Then, for each object:

* **Kinds the knowledge has** are settled by it: *yes* rules the object out, *no* clears
  it, *unknown* leaves it *unsettled* unless the taxonomy's word list says *yes* (the
  taxonomy and an LLM's classification can only rule out, never clear). A dose-dependent
  kind (lactose: an intolerance, not an allergy) is not broken by what a curated entry
  says only a variant *may* add; it is by what holds it for certain, and a food that could
  hold anything or a word nothing places is still asked about.
* **Words that name no kind** ("dislikes coriander") and kinds only the taxonomy has
  rule out a name that holds them, as the taxonomy reads names.
* Known non-food objects (a plate, a towel) are never unsettled; an object nothing knows
  is treated as food where the skill library serves it (onto a plate, into a cup).

An instruction is ruled out or unsettled when an object it handles is. A request can add
constraints, never remove one: the rules come from stored facts and the knowledge, not from
what a request claims about them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carryon_planner.core.knowledge import Answer, Confirmation, FoodKnowledge
from carryon_planner.core.plan import Plan, PlannedSubtask
from carryon_planner.core.taxonomy import SAID, Taxonomy
from carryon_planner.core.wishes import wanted_names

if TYPE_CHECKING:  # the validator's facts; the validator imports this module
    from carryon_planner.core.validator import PlanningFacts


@dataclass(frozen=True)
class Constraint:
    """One fact or clause: the knowledge's kinds it rules out, and what only the taxonomy
    can check (words that are no kind, kinds only the taxonomy has)."""

    text: str
    kinds: frozenset[str]
    other: frozenset[str]


def read_constraints(texts: Iterable[str], taxonomy: Taxonomy, knowledge: FoodKnowledge) -> list[Constraint]:
    """Each text that rules something out, read as a Constraint."""
    out: list[Constraint] = []
    for text in texts:
        kinds: set[str] = set()
        other: set[str] = set()
        # A possessive reads as one word ("cow's milk" is cows milk, not "cow").
        plain = re.sub(r"(\w)['’]s\b", r"\1s", text)
        for term in taxonomy.excluded(plain):
            named = knowledge.kinds_named(term)
            if named:
                kinds |= named
            else:
                other.add(term)
        if kinds or other:
            out.append(Constraint(text.strip(), frozenset(kinds), frozenset(other)))
    return out


@dataclass(frozen=True)
class Settled:
    """name -> why, for what the constraints rule out and what they leave unsettled."""

    ruled_out: Mapping[str, str]
    unsettled: Mapping[str, str]


def settle(
    objects: Iterable[str],
    instructions: Mapping[str, Sequence[str]],
    constraints: Sequence[Constraint],
    *,
    taxonomy: Taxonomy,
    knowledge: FoodKnowledge,
    serving: Iterable[str] = (),
    confirmations: Iterable[Confirmation] = (),
) -> Settled:
    """Settle every object and every library instruction (lower-cased, with the objects it
    handles). `serving`: the instructions that put what they handle onto or into a vessel
    (what they handle may be food even when nothing knows it)."""
    said = tuple(confirmations)
    serving = set(serving)
    served = {o for i in serving for o in instructions.get(i, ())}
    ruled: dict[str, str] = {}
    unsettled: dict[str, str] = {}
    for name in objects:
        verdict = _settle_object(name, constraints, taxonomy, knowledge, served=name in served, said=said)
        if verdict is not None:
            (ruled if verdict[0] else unsettled)[name] = verdict[1]
    for instruction, handled in instructions.items():
        words_hit = _taxonomy_only(instruction, constraints, taxonomy)
        if words_hit is not None:
            ruled[instruction] = words_hit
            continue
        hits = [ruled[o] for o in handled if o in ruled]
        if hits:
            ruled[instruction] = hits[0]
            continue
        # an object nothing knows is a doubt only where this instruction serves it
        doubts = [unsettled[o] for o in handled if o in unsettled and (instruction in serving or knowledge.is_food(o))]
        if doubts:
            unsettled[instruction] = doubts[0]
    return Settled(ruled, unsettled)


def _taxonomy_only(name: str, constraints: Sequence[Constraint], taxonomy: Taxonomy) -> str | None:
    """Why words that are no kind (or kinds only the taxonomy has) rule `name` out."""
    exclusions = [(c.text, set(c.other)) for c in constraints if c.other]
    return taxonomy._why(name, exclusions) if exclusions else None


def _settle_object(
    name: str,
    constraints: Sequence[Constraint],
    taxonomy: Taxonomy,
    knowledge: FoodKnowledge,
    *,
    served: bool,
    said: tuple[Confirmation, ...],
) -> tuple[bool, str] | None:
    """(True, why) ruled out; (False, why) unsettled; None fine."""
    hit = _taxonomy_only(name, constraints, taxonomy)
    if hit is not None:
        return True, hit
    food = knowledge.is_food(name)
    if food is False or (food is None and not served):
        return None
    spoken = name.replace("_", " ")
    listed = knowledge.closure(k for term in taxonomy.kinds_of(name) for k in knowledge.kinds_named(term))
    doubted: list[str] = []  # every kind in doubt, asked in one question
    doubt = ""  # the first constraint and source in doubt
    for constraint in constraints:
        for kind in sorted(constraint.kinds):
            verdict = knowledge.contains(name, kind, said)
            if verdict.answer == Answer.YES:
                return True, _why(constraint.text, spoken, kind, verdict.source)
            if verdict.answer == Answer.UNKNOWN and kind in listed:
                return True, _why(constraint.text, spoken, kind, "taxonomy")
            if verdict.answer == Answer.UNKNOWN and verdict.only_may and knowledge.kinds[kind].dose_dependent:
                continue  # an intolerance: what a variant may add is a little (lactose in some hams)
            if verdict.answer == Answer.UNKNOWN and kind.replace("_", " ") not in doubted:
                doubted.append(kind.replace("_", " "))
                doubt = doubt or f"{constraint.text}; {verdict.source}"
    if not doubted:
        return None
    kinds = doubted[0] if len(doubted) == 1 else f"{', '.join(doubted[:-1])} or {doubted[-1]}"
    return False, f"whether the {spoken} has {kinds} ({doubt})"


def _why(constraint: str, spoken: str, kind: str, source: str) -> str:
    """What a user reads: "diet preference: vegetarian: chorizo is pork (food knowledge)", with
    where the answer came from (not the knowledge's own note on the food)."""
    said = "" if spoken == kind.replace("_", " ") else f": {spoken} is {kind.replace('_', ' ')}"
    return f"{constraint}{said} ({source.split(':', maxsplit=1)[0]})"


def rules_out_of(text: str, taxonomy: Taxonomy, knowledge: FoodKnowledge | None) -> set[str]:
    """What a fact's text rules out: the knowledge's kinds and the other words."""
    if knowledge is None:
        return taxonomy.excluded(text)
    return {x for c in read_constraints([text], taxonomy, knowledge) for x in c.kinds | c.other}


# -- what a plan's subtasks serve (the validator's and the mends' view) --------------------
def asked_ruled_out(facts: PlanningFacts) -> list[str]:
    """The objects the request asks for by name ("Make me a peanut butter sandwich") that
    the user's remembered preferences rule out (not what the request itself declines)."""
    remembered = {n for n, why in facts.ruled_out.items() if n in facts.objects and not why.startswith(SAID)}
    # every object is looked for, so that a longer name wins: "the sesame-free hummus" is not "hummus"
    return [n for n in wanted_names(facts.request, sorted(facts.objects)) if n in remembered]


def standing_in(moves: Sequence[tuple[str, str]], facts: PlanningFacts) -> list[str]:
    """Of a plan's moving subtasks, (id, target) in order, those that would stand in for
    what the request asks for by name and the preferences rule out. Not one on something
    else the request names that nothing rules out ("Miso soup and the ceviche" with a soy
    allergy: the ceviche is still served), nor the opening of a cover when such a subtask
    remains."""
    wanted = {n for n in wanted_names(facts.request, sorted(facts.objects)) if n not in facts.ruled_out}
    serving = any(target in wanted for _, target in moves)
    kept = wanted | (facts.known_covers if serving else frozenset())
    return [sid for sid, target in moves if target not in kept]


def unsettled_in(subtask: PlannedSubtask, facts: PlanningFacts) -> tuple[str, str] | None:
    """(name, why) when a vla subtask acts on what no trusted source settles for the user."""
    if subtask.kind == "vla":
        for name in (subtask.target, subtask.instruction.lower()):
            if name in facts.unsettled and name not in facts.ruled_out:
                return name, facts.unsettled[name]
    return None


def preference_conflict(subtask: PlannedSubtask, facts: PlanningFacts) -> tuple[str, str] | None:
    """(name, preference) when a vla subtask acts on what the user's preferences rule out:
    its target or its instruction, read as a whole phrase (longest taxonomy phrase first:
    "put the peanut butter on the bread" is peanut, not the butter of a dairy-free diet)."""
    if subtask.kind == "vla":
        for name in (subtask.target, subtask.instruction.lower()):
            if name in facts.ruled_out:
                return name, facts.ruled_out[name]
    return None


def asked_unsettled(facts: PlanningFacts) -> list[str]:
    """The objects the request asks for by name that no trusted source settles for the user:
    the reply asks about them even when the plan leaves them out."""
    doubtful = {n for n in facts.unsettled if n in facts.objects and n not in facts.ruled_out}
    return [n for n in wanted_names(facts.request, sorted(facts.objects)) if n in doubtful]


def asks_about(reply: str, name: str) -> bool:
    """Whether a reply asks about `name` as the ask-back does ("... whether the potluck stew has ...")."""
    return f"whether the {name.replace('_', ' ').lower()} " in reply.lower()


def ask_first_problems(plan: Plan, facts: PlanningFacts) -> Iterable[tuple[str, str, str]]:
    """(check, message, subtask id) for the validator's ask_first check."""
    for subtask in plan.subtasks:
        doubt = unsettled_in(subtask, facts)
        if doubt is not None:
            name, why = doubt
            yield (
                "ask_first",
                f"{name.replace('_', ' ')} may break the user's constraint ({why}): do not serve it; ask the user "
                "in the reply",
                subtask.id,
            )
    for name in asked_unsettled(facts):
        if not asks_about(plan.reply, name):
            yield "ask_first", f"the user asks for {name.replace('_', ' ')} ({facts.unsettled[name]}): ask first", ""
