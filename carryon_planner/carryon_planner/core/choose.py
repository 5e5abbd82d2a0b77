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
Where the request names a fact of the user's that says what it uses ("Make me a sandwich":
sandwich.filling), the model is asked with that fact in the question, and what it picks
is held to the fact like any plan; where memory holds such a fact but the request does
not name it ("Could you fix me lunch"), the user is asked whether they want those.

Which fact a request is about is the model's question too where the request names none
and they are several keys of one entity ("Heading to the pool" with habits for swimming
and for work: `relevant_to`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from carryon_common.core.llm import ChatMessage, LlmClient, LlmError
from carryon_planner.core.context import RelevantFact, relevant_facts
from carryon_planner.core.memory_ops import StoredFact
from carryon_planner.core.mend_usual import follow_memory
from carryon_planner.core.plan import Plan
from carryon_planner.core.plan_edits import REPLY_LIMIT, drop, said_steps, spoken
from carryon_planner.core.usual import Remembered, crowded_family, slot, usual_items
from carryon_planner.core.validator import PlanningFacts

MAX_PICKS = 3
NOTHING_ELSE = "nothing else"
NONE_OF_THEM = "none of these"
ASKED = "[acts_on_what_is_needed] nothing dispatched"  # the fix mend reports when it asks the user instead
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
    llm: LlmClient,
    request: str,
    offered: Sequence[str],
    *,
    doing: str = "use",
    limit: int = MAX_PICKS,
    memory: str = "",
) -> list[str]:
    """What `request` needs of `offered` (spoken names), most important first, one question
    at a time; `doing` says what is done with them ("put in the bag"); `memory`, what the
    person's memory says about the request ("sandwich.filling: tuna and cucumber"), is
    put in each question. Raises LlmError when the model cannot be reached; an answer
    outside the options ends the choosing."""
    said = f'The person said: "{request}"\n' + (f"Their memory says: {memory}.\n" if memory else "")
    picks: list[str] = []
    while len(picks) < limit:
        left = [o for o in offered if o not in picks]
        if not left:
            break
        if not picks:
            question = f"{said}There are: {', '.join(left)}.\nWhat is the most important thing to {doing} for this?"
            options = left
        else:
            question = (
                f"{said}The robot will {doing} the {', '.join(picks)}. "
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
    a plan, memory says what the request uses but the request does not name that fact
    ("Could you fix me lunch": the user is asked "those?"), the model answers nothing
    usable, or none of its choices is in the plan. Where the request names the fact ("Make
    me a sandwich": sandwich.filling), the model is asked with it in front of it, and its
    picks are checked against it like any plan (follows_memory)."""
    names = sorted(facts.objects)
    crowded = crowded_family(
        plan.subtasks, instructions=facts.instructions, names=names, request=facts.request, remembered=facts.remembered
    )
    if crowded is None:
        return None
    remembered = usual_items(
        plan.subtasks, facts.remembered, instructions=facts.instructions, names=names, request=facts.request
    )
    if remembered is not None and not remembered.named:  # a fact the request does not name: the user is asked
        return None
    family = crowded[0]
    slots = {i: found[1] for i in facts.instructions if (found := slot(i, names)) and found[0] == family}
    offered = {spoken(obj): obj for obj in slots.values() if obj not in facts.ruled_out}
    try:
        doing = " ".join(family.replace("the {}", "").replace("{}", "").split())  # "put in the bag"
        memory = "; ".join(remembered.facts) if remembered is not None else ""
        # as many picks as memory names, if it names any: a third pick past a remembered two
        # made a small family's cut plan a copy again (ham, tofu, cheese of four)
        limit = max(1, len(remembered.wanted)) if remembered is not None else MAX_PICKS
        answers = choose_needed(llm, facts.request, list(offered), doing=doing, memory=memory, limit=limit)
        picks = [offered[p] for p in answers]
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


def relevant_to(
    llm: LlmClient, request: str, facts: Sequence[StoredFact], objects: Sequence[str]
) -> list[RelevantFact]:
    """The user's facts that bear on `request` (context.relevant_facts). Where the request
    names none of them and they are several keys of one entity ("Heading to the pool" with
    habits for swimming and for work), the model is asked which key the request is about,
    from the keys as an enum or "none of these"; the one it names counts as named (the plan
    must follow it). No usable answer, or a model that cannot be reached: all of them,
    none named, as before (the plan's model picks, and nothing is mended from them)."""
    relevant = relevant_facts(request, facts, objects)
    if len(relevant) < 2 or any(r.named for r in relevant) or len({r.fact.entity for r in relevant}) > 1:
        return relevant
    keys = {r.fact.key.replace("_", " "): r for r in relevant}
    # The keys alone: with the facts' values in the question the 1.5B model named the first
    # key for most requests (7 of 14 in a probe, against 13 of 14 with the keys alone).
    question = (
        f'The person said: "{request}"\nWhich of these is this request for? Options: {", ".join(keys)}. '
        f'If it is for none of them, answer "{NONE_OF_THEM}".'
    )
    try:
        text = llm.complete(
            [ChatMessage("system", _SYSTEM), ChatMessage("user", question)], _schema([*keys, NONE_OF_THEM])
        )
        answer = json.loads(text).get("thing")
    except (LlmError, ValueError, AttributeError):
        return relevant
    if answer not in keys:
        return relevant
    return [dataclasses.replace(keys[answer], named=True)]
