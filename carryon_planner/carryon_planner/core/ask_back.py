"""The ask-back: what the planner does not know about an object, it asks about; it never
serves it to someone whose diet, allergy or stated wish it might break.

An object is *unsettled* for the user when no trusted source says whether it holds a kind
one of their constraints rules out (core/constraints.py, core/knowledge.py). Then:

* the validator's `ask_first` check refuses a plan with a VLA subtask that serves it, and a
  plan whose reply does not ask about one the request names (`ask_first_problems` in
  core/constraints.py);
* the mend (`ask_unsettled`, run with the other deterministic repairs of core/mend.py)
  drops those subtasks and the steps after them that handle the same object, keeps the
  rest of what was asked for, and says the question in the reply: "I don't know whether the
  potluck stew has meat. Shall I bring it anyway, or can you tell me what is in it?";
* the planning outcome lists the objects asked about (`asked_about`, PlanningOutcome.questions).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from carryon_planner.core.constraints import asked_unsettled, asks_about, unsettled_in
from carryon_planner.core.plan import Plan
from carryon_planner.core.plan_edits import REPLY_LIMIT, drop, flagged, mentioned, spoken, with_followers

if TYPE_CHECKING:  # the validator's facts; the validator imports this module
    from carryon_planner.core.validator import PlanningFacts

_REFUSAL_LIMIT: int = Plan.model_json_schema()["properties"]["refusal"]["anyOf"][0]["maxLength"]


ASK_FIRST = "[ask_first]"


def asked_about(fixes: Iterable[str]) -> tuple[str, ...]:
    """The objects the ask-back asked the user about, from a mended plan's fixes."""
    return tuple(
        dict.fromkeys(f.split(":")[0].removeprefix(ASK_FIRST).strip() for f in fixes if f.startswith(ASK_FIRST))
    )


def ask_unsettled(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    """The mend: drop what serves an unsettled object, and ask about it (see the module)."""
    doubts = flagged(raw, lambda subtask: unsettled_in(subtask, facts))
    named = {n for n in asked_unsettled(facts) if not asks_about(raw["reply"], n)}  # asked for, left out
    if not doubts and not named:
        return []
    dropped = set(doubts)
    unsure = {spoken(n): n for n in facts.unsettled if n in facts.objects}
    asked = named | {
        unsure[name]
        for e in raw["subtasks"]
        if e["id"] in dropped
        for name in unsure
        if mentioned(f"{e['instruction']} {e['target']}", {name})
    }
    dropped = with_followers(raw, dropped, {spoken(a) for a in asked})  # and what comes after on the same
    drop(raw, dropped)
    questions = [f"I don't know {_whether(facts.unsettled[name])}" for name in sorted(asked)]
    question = "; ".join(questions) + ". Shall I bring it anyway, or can you tell me what is in it?"
    kept = [e["instruction"] for e in raw["subtasks"] if e["kind"] == "vla"]
    if kept:
        raw["reply"] = f"I will {', then '.join(kept)}. {question}"
    else:
        raw["subtasks"] = []
        if not raw["memory_operations"]:
            raw["refusal"] = f"asked the user first: {'; '.join(questions)}"[:_REFUSAL_LIMIT]
        raw["reply"] = question
    raw["reply"] = raw["reply"][:REPLY_LIMIT]
    return [
        f"{ASK_FIRST} {name}: dropped {', '.join(sorted(dropped))}: {facts.unsettled[name]}" for name in sorted(asked)
    ]


def _whether(why: str) -> str:
    """ "whether the potluck stew has meat" from an unsettled object's why."""
    head = why.split(" (", 1)[0]
    return head if head.startswith("whether") else f"whether it is safe for you ({why})"
