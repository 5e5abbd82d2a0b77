"""What a request asks for: an action, or only information or a statement of fact (the
validator's `action_requested` check: a question or a statement must not move objects)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

# Requests that ask for information or state a fact, not for an action (first word).
_QUESTION_WORDS = ("what", "where", "which", "who", "whose", "when", "why", "how", "is", "are", "do", "does", "did")
_STATEMENT_STARTS = (
    *("i", "i'm", "im", "i've", "i'd", "my", "remember", "note", "fyi", "from now on", "going forward", "as of"),
    # what to do with what was said is to remember it: "Keep that on file", "Store that permanently"
    *(f"{verb} {what}" for verb in ("keep", "store", "save", "record", "log", "file") for what in ("that", "this")),
)
# Clause openings that make a statement, not an order ("the keys are on the sofa now").
_SUBJECTS = (
    "the",
    "this",
    "that",
    "these",
    "those",
    "it",
    "it's",
    "they",
    "they're",
    "we",
    "he",
    "she",
    "you",
    "there",
    "today",
    "just",
    "no",
    "not",
    "yes",
    "thanks",
    "thank",
    "ok",
    "okay",
    "hi",
    "hello",
    "good",
)
_FILLERS = ("please", "and", "so", "now", "also", "then", "but")


# "I'd love the hummus", "I'll have the soup": a wish for something now is an order.
_DESIRE = re.compile(
    r"^(?:i'?d|i would|i'?ll|i will)\s+(?:really\s+|just\s+|also\s+)?(?:like|love|have|take|fancy|go for)\b"
    r"(?!\s+to\s+(?:know|ask|tell|say|check))"
)
# A clause that opens like a noun phrase ("The soup of the day for me", "My lunch, the way I
# always have it") and holds no verb is an elliptical order; with a verb it is a statement.
_DETERMINERS = ("the", "my", "a", "an", "some", "this", "that", "these", "those", "our")
_FINITE = frozenset(
    [
        "is",
        "are",
        "was",
        "were",
        "am",
        "be",
        "been",
        "being",
        "has",
        "have",
        "had",
        "does",
        "do",
        "did",
        "will",
        "would",
        "can",
        "could",
        "should",
        "shall",
        "must",
        "may",
        "might",
        "won't",
        "can't",
        "don't",
        "doesn't",
        "didn't",
        "isn't",
        "aren't",
        "wasn't",
        "weren't",
        "hasn't",
        "haven't",
    ]
)
_NOTHING_NOW = re.compile(r"\bnothing\b[^.,;:!?]*\b(?:now|yet|today|at the moment)\b|\bnot\s+(?:right\s+)?now\b")
_CLAUSE = re.compile(r"[.,;:!?]|\s[-\u2013\u2014]\s")


def _verbless(words: list[str], names: Iterable[str]) -> bool:
    """Whether a clause opening like a noun phrase holds no verb: no auxiliary or copula, no
    contraction, and no word that reads as an inflected verb ("contains", "spilled") once the
    known names are taken out ("the lupini beans for me")."""
    text = " " + " ".join(words) + " "
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(" " + name.replace("_", " ").lower() + " ", " ")
    rest = text.split()
    return not any(w in _FINITE or "'" in w or (len(w) > 3 and w.endswith(("s", "ed"))) for w in rest[1:])


def request_asks_for_action(request: str, names: Iterable[str] = ()) -> bool:
    """False for questions ("where is my mug?") and statements ("I'm vegetarian", "remember
    that ...", "the keys are on the sofa now"); True when any clause is an order ("Serve
    me food", "I'm going swimming, pack my bag", "The keys are on the sofa. Put them away."),
    a wish for something now ("I'd love the hummus"), or a noun phrase with no verb ("The
    soup of the day for me, please"; `names`: the known object names, taken out first)."""
    words = re.findall(r"[a-z']+", request.lower())
    if not words:
        return False
    if request.strip().endswith("?") and words[0] in _QUESTION_WORDS:
        return False
    if _NOTHING_NOW.search(request.lower()):  # "Going forward, oat milk in my porridge. Nothing needed now."
        return False
    names = list(names)
    for clause in _CLAUSE.split(request.lower()):
        clause_words = re.findall(r"[a-z']+", clause)
        while clause_words and clause_words[0] in _FILLERS:
            clause_words.pop(0)
        if not clause_words:
            continue
        text = " ".join(clause_words)
        if _DESIRE.match(text) or (clause_words[0] in _DETERMINERS and _verbless(clause_words, names)):
            return True
        if any(text == s or text.startswith(s + " ") for s in _STATEMENT_STARTS):
            continue
        if clause_words[0] in _SUBJECTS or clause_words[0] in _QUESTION_WORDS:
            continue
        return True
    return False


def users_named(text: str, users: Iterable[str]) -> list[str]:
    """The `users` (lower-case ids) that lower-case `text` names as a word of its own:
    "bob_diet" and "bob eats meat" name bob, "bobcat" does not."""
    return [u for u in users if re.search(rf"(?<![a-z0-9]){re.escape(u)}(?![a-z0-9])", text)]


def readable(text: str) -> str:
    """`text` as a reader sees it, lower case: look-alikes folded (NFKC: full-width letters,
    no-break spaces), whitespace runs as one space, invisible characters (zero-width, bidi
    marks, NUL) removed, so "h\u200bam" reads "ham"."""
    spaced = " ".join(unicodedata.normalize("NFKC", text).split())
    return "".join(c for c in spaced if unicodedata.category(c) not in ("Cf", "Cc")).lower()


_ABOUT_SOMEONE = re.compile(
    r"\b(?:usual|usually|likes?|loves?|prefers?|favou?rite|allerg\w*|diet|eats?|drinks?|snacks?\s+on|"
    r"habits?|training|trains?|secret|job|health)\b"
)


def about_other_users(request: str, other_users: Iterable[str]) -> list[str]:
    """The other users a request asks about or would use the memory of: it names them, and
    either is no order or speaks of their likes, habits, diet or the like (an order that only
    names them, "put the cup by Henry's chair", is not about their memory)."""
    text = readable(request)
    named = sorted(users_named(text, other_users))
    if named and (not request_asks_for_action(request) or _ABOUT_SOMEONE.search(text)):
        return named
    return []
