"""What a request asks for: an action, or only information or a statement of fact (the
validator's `action_requested` check: a question or a statement must not move objects)."""

from __future__ import annotations

import re

# Requests that ask for information or state a fact, not for an action (first word).
_QUESTION_WORDS = ("what", "where", "which", "who", "whose", "when", "why", "how", "is", "are", "do", "does", "did")
_STATEMENT_STARTS = ("i", "i'm", "im", "i've", "i'd", "my", "remember", "note", "fyi", "from now on")
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


def request_asks_for_action(request: str) -> bool:
    """False for questions ("where is my mug?") and statements ("I'm vegetarian", "remember
    that ...", "the keys are on the sofa now"); True when any clause is an order ("Serve
    me food", "I'm going swimming, pack my bag", "The keys are on the sofa. Put them away.")."""
    words = re.findall(r"[a-z']+", request.lower())
    if not words:
        return False
    if request.strip().endswith("?") and words[0] in _QUESTION_WORDS:
        return False
    for clause in re.split(r"[.,;:!?]", request.lower()):
        clause_words = re.findall(r"[a-z']+", clause)
        while clause_words and clause_words[0] in _FILLERS:
            clause_words.pop(0)
        if not clause_words:
            continue
        text = " ".join(clause_words)
        if any(text == s or text.startswith(s + " ") for s in _STATEMENT_STARTS):
            continue
        if clause_words[0] in _SUBJECTS or clause_words[0] in _QUESTION_WORDS:
            continue
        return True
    return False
