"""Choosing what a request needs from a family the plan copied whole (issue 20).

Asked to "pack my bag for swimming", the 1.5B model packs all sixteen things on the shelf,
and asked again in a repair round, packs them again; asked for several at once ("which of
these does it need?") it names the first few options. Asked for *one* thing, from the
family's objects as an enum, it mostly names the right one (the swimsuit, the laptop for
work, the umbrella in the rain: 10 of the packing suite's 20 no-habit requests in a probe,
against 2 when the whole plan answered). So where mend would otherwise ask the user which
ones (core/mend_usual.py `ask_instead`), the planner asks the model for the most important
thing, then for another "for the same purpose" or "nothing else" (up to MAX_PICKS), and
the plan keeps just those. What the preferences rule out is never offered, the result is
validated like any plan, and a model that cannot answer leaves the question to the user.
Where the user's memory names what the request uses (a sandwich's filling, a habit), the
user is asked whether they want those (a copy of the whole family is not the model's
choice, and the model is not asked to choose against memory).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from carryon_common.core.llm import ChatMessage, LlmClient, LlmError
from carryon_planner.core.mend_usual import REPLY_LIMIT, drop, follow_memory, said_steps, spoken
from carryon_planner.core.plan import Plan
from carryon_planner.core.usual import Remembered, crowded_family, slot, usual_items
from carryon_planner.core.validator import PlanningFacts

MAX_PICKS = 3
NOTHING_ELSE = "nothing else"
ASKED = "[acts_on_what_is_needed]"  # the fix mend reports when it asks the user instead
_SYSTEM = "You help a home robot decide what a person needs. Answer in JSON."


def _schema(options: Sequence[str]) -> dict[str, Any]:
    return {
        "title": "Choice",
        "type": "object",
        "properties": {"thing": {"enum": list(options)}},
        "required": ["thing"],
        "additionalProperties": False,
    }


def choose_needed(
    llm: LlmClient, request: str, offered: Sequence[str], *, doing: str = "use", limit: int = MAX_PICKS
) -> list[str]:
    """What `request` needs of `offered` (spoken names), most important first, one question
    at a time; `doing` says what is done with them ("put in the bag"). Raises LlmError when
    the model cannot be reached; an answer outside the options ends the choosing."""
    picks: list[str] = []
    while len(picks) < limit:
        left = [o for o in offered if o not in picks]
        if not left:
            break
        if not picks:
            question = (
                f'The person said: "{request}"\nThere are: {", ".join(left)}.\n'
                f"What is the most important thing to {doing} for this?"
            )
            options = left
        else:
            question = (
                f'The person said: "{request}"\nThe robot will {doing} the {", ".join(picks)}. '
                f"There are also: {', '.join(left)}.\nWhich of these does the person need too, for the same "
                f'purpose? If none of them is needed, answer "{NOTHING_ELSE}".'
            )
            options = [NOTHING_ELSE, *left]
        text = llm.complete([ChatMessage("system", _SYSTEM), ChatMessage("user", question)], _schema(options))
        try:
            thing = json.loads(text).get("thing")
        except (ValueError, AttributeError):
            break
        if thing not in left:
            break
        picks.append(thing)
    return picks


def choose_for_crowded(llm: LlmClient, plan: Plan, facts: PlanningFacts) -> tuple[Plan, tuple[str, ...]] | None:
    """`plan` (which copies most of a family the request names nothing of) cut down to what
    the model, asked one thing at a time, says the request needs; None when it is not such
    a plan, memory names what the request uses, the model answers nothing usable, or none
    of its choices is in the plan."""
    names = sorted(facts.objects)
    crowded = crowded_family(plan.subtasks, instructions=facts.instructions, names=names, request=facts.request)
    if crowded is None:
        return None
    remembered = usual_items(
        plan.subtasks, facts.remembered, instructions=facts.instructions, names=names, request=facts.request
    )
    if remembered is not None:  # memory names what the request uses: the user is asked "those?"
        return None
    family = crowded[0]
    slots = {i: found[1] for i in facts.instructions if (found := slot(i, names)) and found[0] == family}
    offered = {spoken(obj): obj for obj in slots.values() if obj not in facts.ruled_out}
    try:
        doing = " ".join(family.replace("the {}", "").replace("{}", "").split())  # "put in the bag"
        picks = [offered[p] for p in choose_needed(llm, facts.request, list(offered), doing=doing)]
    except LlmError:
        return None
    raw: dict[str, Any] = plan.model_dump(mode="json")
    in_family = [e for e in raw["subtasks"] if e["kind"] == "vla" and e["instruction"] in slots]
    if not picks or not any(slots[e["instruction"]] in picks for e in in_family):
        return None
    drop(raw, {e["id"] for e in in_family if slots[e["instruction"]] not in picks})
    label = f"what the request needs ({family.replace('{}', '...')}): {', '.join(spoken(p) for p in picks)}"
    raw["reply"] = said_steps(raw)[:REPLY_LIMIT]
    chosen = dataclasses.replace(facts, remembered=(Remembered(label, tuple(picks)),))
    follow_memory(raw, chosen)  # adds what was chosen but not in the plan, says the reply anew
    fix = f"[chosen_by_the_model] {label} (asked one thing at a time: {len(picks)} of {len(offered)})"
    return Plan.model_validate(raw), (fix,)
