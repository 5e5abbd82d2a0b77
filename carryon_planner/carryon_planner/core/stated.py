"""Where the request says a remembered object is now (issue 20): "The keys are on the sofa
now. Put them in the box." is read without the model, so that the plan records it
(update_scene move_item, core/usual.py's `stated_move_recorded`) and the planner looks for
the object there (core/facts.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from carryon_planner.core.steps import named_in

_ORDER = re.compile(
    r"^(?:please\s+)?(?:put|bring|take|move|place|get|carry|tidy|give|fetch|hand|could|can|would|will|is|are|where)\b"
)
_NEGATED = re.compile(r"\b(?:not|no longer|any ?more)\b|n't\b")
_STATES = re.compile(r"\b(?:is|are|moved|left|put|now|sits|lies|lives)\b|'s\b|'re\b")
_PRONOUN = re.compile(r"\b(?:it|they|them)\b")


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
