"""The user's answer to a question about an object, remembered as a fact about the object.

The ask-back (core/ask_back.py) replies "I don't know whether the peperonata has gluten —
shall I bring it?". The user answers in their next request: "The peperonata has no gluten,
bring it", "there is no mustard in the house dressing", "the stew contains nuts". A clause
whose subject is one object and that says it has, contains or is made with a kind, or has
none, is free of it, is read here without the model:

* it settles that object and kind for this request's own plan (core/knowledge.py: what the
  user said comes before the curated knowledge);
* the plan writes it to the user's memory (`update_user` entity = the object, key =
  `contains_<kind>`, value "no <kind>" or "has <kind>", durable), so the next plan needs no
  question: `confirmations_from` reads it back, attributed to the user whose memory holds
  it. Such a fact is about the object, not a constraint of the user's: the constraint
  reader does not read it (`is_answer`).

Questions ("does the stew have nuts?"), hedges ("I think the stew has no nuts") and wishes
("the hummus without sesame") say nothing about an object and are not read. A "has no"
never clears what the curated knowledge says the object always holds (the cheddar stays
milk): a request can settle what nothing knows, never remove a constraint.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from carryon_planner.core.knowledge import Answer, Confirmation, FoodKnowledge
from carryon_planner.core.plan import Plan, UpdateUser
from carryon_planner.core.steps import named_in

KEY_PREFIX = "contains_"  # an answer's key: entity `potluck_stew`, key `contains_sesame`
_HOLDS_NOT = re.compile(r"^\s*(?:no|none|not|never|free|without|doesn'?t|does not|hasn'?t|has no)\b")


def confirmations_from(
    facts: Iterable[tuple[str, str, str]], knowledge: FoodKnowledge | None, user: str
) -> tuple[Confirmation, ...]:
    """What the user said about objects, as their memory holds it: a fact whose key is
    `contains_<kind>` and whose entity is the object (entity `potluck_stew`, key
    `contains_meat`, value "no meat" or "has meat"). A value that starts with a negation says
    the object lacks the kind. Only that form: a preference such as `porridge.milk: oat
    milk` says what the user likes, not what the porridge holds."""
    if knowledge is None:
        return ()
    out = []
    for entity, key, value in facts:
        if not key.startswith(KEY_PREFIX):
            continue
        for kind in sorted(knowledge.kinds_named(key.removeprefix(KEY_PREFIX))):
            out.append(Confirmation(entity, kind, not _HOLDS_NOT.search(value.lower()), user))
    return tuple(out)


_CLAUSES = re.compile(r"(?<=[.!;])\s+|,\s*|\s+-\s+|\bbut\b|\band then\b")
_VERB = r"(?:has|have|contains?|is|are|'s|does|do|was|were)(?=n't\b|\b)"
_NEGATED = re.compile(r"n't\b|\b(?:no|not|none|never|without|free|zero)\b")
_HEDGED = re.compile(r"\b(?:think|maybe|perhaps|probably|might|may|guess|not sure|unsure|if|whether)\b")
_PRONOUN = re.compile(r"^\s*(?:yes\s+|no\s+)?(it|this|that)\b")
_QUESTION_START = re.compile(r"^\s*(?:does|do|is|are|has|have|can|could|would|will)\b")


def answer_key(kind: str) -> str:
    return f"{KEY_PREFIX}{kind}"


def is_answer(key: str, knowledge: FoodKnowledge | None) -> bool:
    """Whether a fact's key is an answer about an object ("contains_sesame")."""
    return knowledge is not None and key.startswith(KEY_PREFIX) and bool(knowledge.kinds_named(key[len(KEY_PREFIX) :]))


def _said(clause: str, subject: str, knowledge: FoodKnowledge) -> list[tuple[str, bool]]:
    """(kind, holds) for what `clause` says of `subject` (a name, or "it" / "this")."""
    spoken = re.escape(subject.replace("_", " "))
    said = re.search(rf"\b{spoken}\s+(?P<verb>{_VERB})(?P<rest>.*)$", clause) or re.search(
        rf"\bthere(?:'s|\s+is|\s+are)\b(?P<rest>.*?)\bin\s+(?:the\s+|my\s+|this\s+)?{spoken}\b", clause
    )
    if said is None:
        return []
    glued = "verb" in said.groupdict() and said.group("rest").startswith("n't")  # "doesn't", "isn't"
    out: list[tuple[str, bool]] = []
    for part in re.split(r"\band\b|\bbut\b|;", said.group("rest")):
        # each part says its own: "mustard and no egg"; "no mustard or egg" is one part
        negated = glued or _NEGATED.search(part) is not None
        out += [(kind, not negated) for kind in sorted(knowledge.kinds_in(part))]
        if not negated:  # "it is vegan": none of what the diet rules out ("not vegan" says not which)
            for diet, kinds in knowledge.diets.items():
                if re.search(rf"\b{re.escape(diet)}\b", part):
                    out += [(kind, False) for kind in sorted(kinds)]
    return out


def _clauses(text: str, knowledge: FoodKnowledge) -> list[str]:
    """The request's clauses, a list of kinds kept with the clause it continues: "the stew
    has no egg, honey or milk" is one clause."""
    out: list[str] = []
    for part in _CLAUSES.split(text):
        clause = part.strip()
        pieces = [p for p in re.split(r",|\b(?:and|or|nor)\b", clause) if p.strip()]
        if out and pieces and all(knowledge.kinds_named(p) for p in pieces):
            out[-1] = f"{out[-1]}, {clause}"
        elif clause:
            out.append(clause)
    return out


def answers_in(
    request: str, objects: Sequence[str], knowledge: FoodKnowledge | None, user: str
) -> tuple[Confirmation, ...]:
    """What the request says about objects' kinds, as confirmations by `user`. A "has no"
    that the curated knowledge contradicts (it says the object holds the kind) is not read."""
    if knowledge is None:
        return ()
    text = request.lower().replace("’", "'").replace("-", " ").replace("_", " ")
    out: list[Confirmation] = []
    everywhere = [n for n in named_in(text, objects) if knowledge.is_food(n) is not False]
    for clause in _clauses(text, knowledge):
        if clause.endswith("?") or _QUESTION_START.match(clause) or _HEDGED.search(clause):
            continue
        named = named_in(clause, objects)
        if len(named) == 1:
            subject, name = named[0], named[0]
        elif not named and len(everywhere) == 1 and (pronoun := _PRONOUN.match(clause)):
            subject, name = pronoun.group(1), everywhere[0]  # "bring the stew, it has no nuts"
        else:  # one subject, or nothing is read
            continue
        for kind, holds in _said(clause, subject, knowledge):
            if not holds and knowledge.contains(name, kind).answer is Answer.YES:
                continue
            said = Confirmation(name, kind, holds, user)
            if said not in out:
                out.append(said)
    return tuple(out)


def answer_write(said: Confirmation) -> UpdateUser:
    """The memory write of an answer: a lasting fact about the object."""
    value = f"{'has' if said.holds else 'no'} {said.kind.replace('_', ' ')}"
    return UpdateUser(op="update_user", entity=said.obj, key=answer_key(said.kind), value=value, durable=True)


def answer_written(plan: Plan, said: Confirmation) -> bool:
    want = answer_write(said)
    return any(
        isinstance(op, UpdateUser)
        and (op.entity, op.key, op.value, op.durable) == (want.entity, want.key, want.value, True)
        for op in plan.memory_operations
    )


def unwritten(plan: Plan, answers: Iterable[Confirmation]) -> list[Confirmation]:
    """The request's answers the plan does not write (a refusal writes nothing)."""
    return [] if plan.refusal is not None else [a for a in answers if not answer_written(plan, a)]
