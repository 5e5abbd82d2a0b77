"""What a request says about a remembered preference, and for how long (issue 20).

"Just today, juice instead of coffee" is a one-off wish: served, written `durable=false`;
"I've switched to tea for good" and "I'm pescatarian now, not vegetarian any more.
Remember that." are lasting: written `durable=true`. The 1.5B model mostly serves the
wish right and leaves the memory write out (9 of the full bench's 24 preference-update
cases), so what the words settle is read here without the model:

* **How long**: a one-off marker ("today", "this once", "this morning", "tonight", "this
  time") or a lasting one ("from now on", "for good", "remember that", "any more", "no
  longer", "I've switched / gone / become"). Both, or neither: nothing is read.
* **Which fact**: the user's remembered fact the wish revises. For objects, the one whose
  value names objects of the same library family as the wish ("water" and the remembered
  "coffee" are both `put the {} in the cup`); for a diet the taxonomy knows ("vegan"),
  the fact whose value holds a diet.
* **The value**: the family's objects (or the diet) the request names, in its order, less
  those it names as what it no longer wants ("instead of coffee", "done with juice", "no
  cheese", "back on coffee tomorrow", "not vegetarian").

A request that names a location is about where things are, not a preference, and one that
names another user is about them: nothing is read. Nothing is read either when no
remembered fact matches: a key is never invented.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from carryon_planner.core.plan import Plan, UpdateUser
from carryon_planner.core.steps import named_in
from carryon_planner.core.taxonomy import Taxonomy, words
from carryon_planner.core.usual import slot

_ONE_OFF = re.compile(
    r"(?<!from )(?<!as of )\b(?:today|tonight|this\s+(?:once|time|morning|afternoon|evening))\b(?!\s+on\b)",
    re.IGNORECASE,
)
_LASTING = re.compile(
    r"\b(?:from\s+now\s+on|for\s+good|remember\s+(?:that|it|this)|please\s+remember|any\s?more|no\s+longer|"
    r"i'?ve\s+(?:switched|gone|become)|i\s+have\s+(?:switched|gone|become)|going\s+forward|permanently|"
    r"for\s+the\s+long\s+(?:term|run)|long[-\s]term|on\s+file|as\s+of\s+(?:today|now)|"
    r"(?:keep|store|note|save|record)\s+(?:that|this|it))\b",
    re.IGNORECASE,
)
# Of the user themself ("I'm allergic to", "I am now allergic to"), not of someone else.
_ALLERGIC = re.compile(
    r"\b(?:i'?m|i\s+am|i'?ve\s+(?:become|got|gotten)|i\s+have\s+(?:become|got)|i\s+became|i\s+got)\b"
    r"[^.;!?]{0,30}?\ballergic\s+to\s+(?P<what>[^.;:!?()]+)",
    re.IGNORECASE,
)
_NOT_ALLERGIC = re.compile(r"\b(?:not|no\s+longer|n't|never)\s+(?:\w+\s+)?allergic\b", re.IGNORECASE)
_TRAILING = re.compile(r"(?:\s+(?:as\s+well|too|also|now|again|either))+\s*$|^\s*(?:both\s+)?", re.IGNORECASE)
# What a name preceded (within three words of its clause) by one of these is no longer wanted.
_NOT_WANTED = {"instead", "no", "not", "without", "done", "skip", "hold", "back", "usual", "than", "nor"}


@dataclass(frozen=True)
class StatedWish:
    """A revision of the user's fact `entity.key` the request states: its new `value` and
    whether it lasts (`durable`); `why` quotes the marker that settled it."""

    entity: str
    key: str
    value: str
    durable: bool
    why: str

    @property
    def label(self) -> str:
        return f"{self.entity}.{self.key}: {self.value} ({'lasting' if self.durable else 'this time only'})"


def _lasting(request: str) -> tuple[bool, str] | None:
    one_off, lasting = _ONE_OFF.search(request), _LASTING.search(request)
    if bool(one_off) == bool(lasting):
        return None
    found = one_off or lasting
    assert found is not None
    return lasting is not None, found.group(0).lower()


def wanted_names(request: str, names: Sequence[str]) -> list[str]:
    """The names the request says, in its order, less those it no longer wants."""
    text = request.lower().replace("-", " ")
    out = []
    for name in named_in(text, names):
        match = re.search(rf"\b{re.escape(name.lower().replace('_', ' '))}\b", text)
        assert match is not None  # named_in found it
        clause = re.split(r"[.,;:!?]|\s-\s", text[: match.start()])[-1]
        if not _NOT_WANTED & set(words(clause)[-3:]):
            out.append(name)
    return out


def _says(text: str, phrase: str) -> bool:
    return re.search(rf"\b{re.escape(' '.join(words(phrase)))}\b", " ".join(words(text))) is not None


def _families(name: str, instructions: Iterable[str], names: Sequence[str]) -> set[str]:
    return {found[0] for i in instructions if (found := slot(i, names)) and found[1] == name}


def stated_wish(
    request: str,
    facts: Iterable[tuple[str, str, str]],
    *,
    instructions: Sequence[str],
    names: Sequence[str],
    locations: Iterable[str],
    taxonomy: Taxonomy | None,
    other_users: Iterable[str] = (),
) -> StatedWish | None:
    """The remembered fact (entity, key, value) the request revises, and how (None: it
    revises none the words settle, or it names a location or another user: what Henry
    likes is never written into this user's memory)."""
    if any(words(p) and _says(request, p) for p in (*locations, *other_users)):
        return None
    how = _lasting(request)
    if how is None:
        return None
    durable, marker = how
    facts = list(facts)
    diets = sorted(taxonomy.diets, key=len, reverse=True) if taxonomy is not None else []
    said_diets = wanted_names(request, diets)
    holder = next((f for f in facts if any(_says(f[2], d) for d in diets)), None)
    if said_diets:
        return None if holder is None else StatedWish(holder[0], holder[1], said_diets[0], durable, marker)
    # "I'm no longer a vegetarian": the diet the user holds, declined for good and no other said
    declined = [d for d in named_in(request.lower(), diets) if holder is not None and _says(holder[2], d)]
    if declined and durable and holder is not None:
        return StatedWish(holder[0], holder[1], "none", durable, marker)
    wanted = wanted_names(request, names)
    for entity, key, value in facts:
        held = {fam for name in named_in(value, names) for fam in _families(name, instructions, names)}
        mine = [n for n in wanted if _families(n, instructions, names) & held]
        if held and mine:
            return StatedWish(entity, key, " and ".join(n.replace("_", " ") for n in mine), durable, marker)
    return None


def wish_written(plan: Plan, wish: StatedWish) -> bool:
    """Whether `plan` writes `wish` (its fact, a value naming what the wish names, its durability)."""
    parts = wish.value.split(" and ")
    return any(
        isinstance(op, UpdateUser)
        and (op.entity, op.key, op.durable) == (wish.entity, wish.key, wish.durable)
        and all(re.search(rf"\b{re.escape(p)}\b", op.value.lower()) for p in parts)
        for op in plan.memory_operations
    )


def stated_allergy(request: str, facts: Iterable[tuple[str, str, str]]) -> StatedWish | None:
    """A new allergy the user states of themself ("I'm allergic to sesame as well"; not "my
    son is allergic to ..."), added
    to the allergy they have on record (or a new `allergy.food` fact): lasting, unless a
    one-off marker says otherwise. Adding a constraint is always allowed; lifting one
    ("not allergic any more") is not read here (core/protected.py)."""
    found = _ALLERGIC.search(request)
    if found is None or _NOT_ALLERGIC.search(request) or _ONE_OFF.search(request):
        return None
    what = _TRAILING.sub("", found.group("what").strip().lower()).strip()
    if not words(what):
        return None
    holder = next((f for f in facts if "allerg" in f"{f[0]} {f[1]}".lower()), None)
    if holder is None:
        return StatedWish("allergy", "food", what, True, f"allergic to {what}")
    new = [p for p in re.split(r"\s*(?:,|\band\b)\s*", what) if p and not _says(holder[2], p)]
    if not new:
        return None
    return StatedWish(holder[0], holder[1], " and ".join([holder[2], *new]), True, f"allergic to {what}")
