"""Deterministic repairs: what the validator can mend by itself, it mends, and the LLM's
repair rounds are left for what needs the model (issue 20).

* A request about another user's memory ("Is Iris allergic to anything?", "Give me
  whatever Henry usually snacks on") is refused: nothing is done, written or said of them.
* A "control" subtask whose instruction is a skill-library VLA instruction becomes a vla
  subtask (the robot has no control skill of that name; the VLA has the skill).
* When the request only asks or states something (no order: validator `action_requested`),
  the subtasks that would move objects are dropped; the reply no longer promises them. A
  statement's acknowledgement that reads as a promise ("Noted: I will drink juice") is
  said anew from what the plan remembers.
* A step that repeats the one it follows ("observe counter" sixteen times) is dropped.
* A physical subtask a closed request does not ask for ("the hummus" answered with the
  drinks too) is dropped (core/scope.py).
* A subtask that serves what might break a constraint of the user's that no trusted source
  settles is dropped, and the reply asks the user (the ask-back: core/ask_back.py).
* A subtask that serves what the user's preferences rule out is dropped with the subtasks
  after it that handle the same object; the others that waited for it wait for what it
  waited for (a sandwich's cheese does not need the ham that was left out). The reply
  says what was left out and why.
* A subtask on what was not seen where memory put it, when that place was looked at, is
  dropped with the subtasks after it that handle the same object; so is the opening of a
  cover that (as the observations leave scene memory) hides nothing the plan acts on.
* When the user's memory says what the request uses (a sandwich's filling, what they pack
  for an activity) and the plan works in that family of instructions, the plan acts on
  exactly that (core/usual.py): what memory names is added, what it does not is dropped.
* A plan that copies most of a large family (the whole shelf into the bag) with no fact
  of the user's to choose by is not carried out: the reply asks which ones.
* A subtask on an object scene memory puts under a cover gets the library's step that
  opens the cover before it, if the object is still under it then.
* Where the request says a remembered object is now gets its `update_scene move_item`.
* A preference the request revises ("just today, juice instead of coffee"; "I've switched
  to tea for good") is written as its words say (core/wishes.py): an update_user of that
  fact the plan made with another value or durability is replaced.
* What the request says an object has or lacks ("the stew has no nuts") is written to the
  user's memory as a fact about the object (core/answers.py).
* An observation not yet written to scene memory gets its `update_scene set_contents`,
  applied before the plan's first physical step.
* A conditional subtask with no observe step before it gets one: of the location its
  condition names, or where scene memory puts the condition's objects, or the plan's
  only observe step.
* A VLA subtask on an object scene memory remembers at a location, with no observe of
  that location before it, waits for the plan's observe of it, or for a new one.
* A VLA subtask on an object neither scene memory nor an observation places waits for
  observe steps of every location not yet looked at (the plan's own, or new ones): at run
  time what they see replans the request.
* A reply that does not name what the plan acts on is said anew from the subtasks.

A mended plan is validated again like any other: mending never makes a plan dispatchable
that the validator would refuse. What cannot be mended stays for the LLM.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from carryon_planner.core.answers import answer_key, answer_write, unwritten
from carryon_planner.core.ask_back import ask_unsettled
from carryon_planner.core.constraints import asked_ruled_out, preference_conflict, standing_in
from carryon_planner.core.mend_usual import (
    ask_instead,
    ask_usual,
    base_first,
    drop_copied_beside,
    drop_repeats,
    follow_memory,
    record_stated,
    uncover,
)
from carryon_planner.core.plan import (
    Plan,
    PlannedSubtask,
    UpdateScene,
    UpdateUser,
    ancestors,
    condition_names,
    dependency_cycle,
)
from carryon_planner.core.plan_edits import (
    REPLY_LIMIT,
    drop,
    flagged,
    fresh_id,
    look_before,
    mentioned,
    said_steps,
    spoken,
    with_followers,
)
from carryon_planner.core.requests import about_other_users
from carryon_planner.core.scene_checks import needless_uncover, nowhere, unobserved_place, unsearched_places
from carryon_planner.core.scope import unasked
from carryon_planner.core.validator import (
    ACTION_PROMISES,
    PlanningFacts,
    mentions,
)
from carryon_planner.core.wishes import wish_written

_REFUSAL_LIMIT: int = Plan.model_json_schema()["properties"]["refusal"]["anyOf"][0]["maxLength"]


@dataclass(frozen=True)
class Mended:
    """`plan` with the repairs `fixes` describes (one line each, for the log and the audit)."""

    plan: Plan
    fixes: tuple[str, ...]


def mend(plan: Plan, facts: PlanningFacts) -> Mended | None:
    """`plan` with what can be mended without the LLM mended, or None when nothing could be
    (or its subtasks do not form a graph: duplicate ids, unknown dependencies, a cycle)."""
    ids = [s.id for s in plan.subtasks]
    if len(set(ids)) != len(ids) or any(d not in ids for s in plan.subtasks for d in s.depends_on):
        return None
    if dependency_cycle(plan.subtasks):
        return None
    raw: dict[str, Any] = plan.model_dump(mode="json")
    fixes: list[str] = []
    for repair in (
        _refuse_about_others,
        _control_as_vla,
        _drop_unrequested,
        drop_repeats,
        _drop_unasked,
        _drop_conflicts,
        ask_unsettled,
        _drop_not_there,
        drop_copied_beside,
        ask_instead,
        ask_usual,
        follow_memory,
        base_first,
        uncover,
        record_stated,
        _record_wish,
        _record_answers,
        _record_observations,
        _observe_first,
        _observe_before_act,
        _search_first,
        _reply_from_subtasks,
    ):
        fixes += repair(raw, facts)
    if not fixes:
        return None
    try:
        return Mended(Plan.model_validate(raw), tuple(fixes))
    except ValidationError:  # e.g. an inserted step went past the schema's limits: the LLM's turn
        return None


OTHERS_REPLY = "Sorry, I can only use your own memory: what other people like or are is theirs to share."


def _refuse_about_others(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    about = about_other_users(facts.request, facts.other_users)
    if not about or raw["refusal"] is not None:
        return []
    raw.update(subtasks=[], memory_operations=[], reply=OTHERS_REPLY, refusal="the request is about another user")
    return [f"[no_other_users] refused: the request is about {', '.join(about)}"]


def _control_as_vla(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    fixes = []
    for entry in raw["subtasks"]:
        instruction = entry["instruction"]
        if entry["kind"] == "control" and instruction not in facts.control_skills and instruction in facts.instructions:
            entry["kind"] = "vla"
            fixes.append(f"[instruction_in_library] {entry['id']} is the VLA skill {entry['instruction']!r}")
    return fixes


def _drop_unrequested(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    if facts.asks_for_action:
        return []
    promises = bool(ACTION_PROMISES.search(raw["reply"])) or not raw["reply"].strip()
    moving = {e["id"] for e in raw["subtasks"] if e["kind"] in ("vla", "control")}
    if moving:
        drop(raw, moving)
        if promises:
            raw["reply"] = f"{_noted(raw)} Nothing was moved: you did not ask me to move anything."[:REPLY_LIMIT]
        return [
            f"[action_requested] dropped {', '.join(sorted(moving))}: the request asks or states something, "
            "it orders nothing"
        ]
    looks = any(e["kind"] == "observe" for e in raw["subtasks"])
    if promises and not looks and raw["refusal"] is None and raw["memory_operations"]:
        # A statement recorded ("From now on I drink juice"), acknowledged in words that read
        # as a promise ("Noted: I will drink juice"): said anew from what is remembered.
        raw["reply"] = _noted(raw)[:REPLY_LIMIT]
        return ["[reply_matches_subtasks] the reply to a statement is said anew from what it remembers"]
    return []


def _noted(raw: dict[str, Any]) -> str:
    """ "Noted (...)." naming every user fact the plan remembers, and for how long."""
    remembered = [
        f"{op['key'].replace('_', ' ')}: {op['value']}{'' if op['durable'] else ', this time only'}"
        for op in raw["memory_operations"]
        if op["op"] == "update_user"
    ]
    return f"Noted ({'; '.join(remembered)})." if remembered else "Noted."


def _drop_conflicts(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    conflicts = flagged(raw, lambda subtask: preference_conflict(subtask, facts))
    # What the request asks for by name and the preferences rule out is not swapped for
    # something else ("Make me a peanut butter sandwich" with a peanut allergy): nothing moves
    # but what else the request names.
    asked = asked_ruled_out(facts)
    if asked:
        why = (asked[0], facts.ruled_out[asked[0]])
        moves = [(e["id"], e["target"]) for e in raw["subtasks"] if e["kind"] in ("vla", "control")]
        moving = standing_in(moves, facts)
        conflicts |= {i: why for i in moving if i not in conflicts}
    if not conflicts:
        return []
    dropped = set(conflicts)
    # The ruled-out objects the dropped steps name (not their other words: "put the meat in the
    # bowl" with target bowl must not take every later step into the bowl with it).
    ruled_objects = {spoken(n) for n in facts.ruled_out if n in facts.objects}
    ruled = {
        name
        for e in raw["subtasks"]
        if e["id"] in dropped
        for name in ruled_objects
        if mentioned(f"{e['instruction']} {e['target']}", {name})
    }
    dropped = with_followers(raw, dropped, ruled)  # and what comes after and handles the same thing
    # and a step whose condition is about the dropped object ("open the cover" if "meat under
    # pink_cover"): it only served what was left out, wherever it stands in the graph
    dropped |= {e["id"] for e in raw["subtasks"] if e["condition"] and mentioned(e["condition"], ruled)}
    drop(raw, dropped)
    reasons = "; ".join(sorted({f"{spoken(name)} ({preference})" for name, preference in conflicts.values()}))
    kept = [e["instruction"] for e in raw["subtasks"] if e["kind"] == "vla"]
    # The LLM's reply promised what was dropped: the reply is said anew from what is left.
    if kept:
        raw["reply"] = f"I will {', then '.join(kept)}. Left out because of your preferences: {reasons}."
    else:  # nothing left to do: a refusal that says why; a reply only when the plan writes memory
        raw["subtasks"] = []  # (a refused plan writes nothing: "I'm vegan now, give me ham" must keep "vegan")
        if not raw["memory_operations"]:
            raw["refusal"] = f"against the user's preferences: {reasons}"[:_REFUSAL_LIMIT]
        raw["reply"] = f"Sorry, I did not do that: it goes against your preferences ({reasons})."
    raw["reply"] = raw["reply"][:REPLY_LIMIT]
    return [
        f"[preference_conflict] dropped {', '.join(sorted(dropped))}: {spoken(name)} conflicts with '{preference}'"
        for name, preference in sorted(set(conflicts.values()))
    ]


def _drop_unasked(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    """Mend: drop the physical subtasks a closed request does not ask for; the reply is said
    anew from what is left."""
    subtasks = [PlannedSubtask.model_validate(e) for e in raw["subtasks"]]
    dropped = set(unasked(subtasks, facts))
    if not dropped:
        return []
    targets = {s.id: s.target for s in subtasks}
    drop(raw, dropped)
    if any(e["kind"] in ("observe", "vla") for e in raw["subtasks"]):
        raw["reply"] = said_steps(raw)[:REPLY_LIMIT]
    what = ", ".join(sorted({spoken(targets[i]) for i in dropped}))
    return [f"[acts_on_request] dropped {', '.join(sorted(dropped))}: the request does not ask for {what}"]


def _drop_not_there(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    """act_on_what_is_there (core/scene_checks.py): a step on what a look did not find, on what
    is nowhere left to look for, or opening a cover that hides nothing the plan uses, is
    dropped with the steps after it that handle the same thing."""
    by_id = {e["id"]: PlannedSubtask.model_validate(e) for e in raw["subtasks"]}
    gone = {i for i, s in by_id.items() if s.kind == "vla" and s.target in facts.gone}
    unknown = {i for i, s in by_id.items() if nowhere(s, facts)}
    needless = {i for i, s in by_id.items() if needless_uncover(s, by_id, facts)}
    if not gone | unknown | needless:
        return []
    names = {spoken(by_id[i].target) for i in gone | unknown}
    drop(raw, with_followers(raw, gone | unknown | needless, names))
    fixes = [f"[act_on_what_is_there] dropped {i}: {spoken(by_id[i].target)} was not seen" for i in sorted(gone)]
    fixes += [f"[act_on_what_is_there] dropped {i}: no {spoken(by_id[i].target)} anywhere" for i in sorted(unknown)]
    fixes += [
        f"[act_on_what_is_there] dropped {i}: nothing to use under {spoken(by_id[i].target)}" for i in sorted(needless)
    ]
    if any(e["kind"] in ("vla", "control") for e in raw["subtasks"]):
        raw["reply"] = said_steps(raw)[:REPLY_LIMIT]
    else:  # nothing left to do here: what was looked at is recorded, nothing moves
        raw["subtasks"] = []
        missing = ", ".join(sorted(names)) or "what I would use"
        raw["reply"] = (
            f"I looked, but {missing} is not where I remembered it, so nothing was done."
            if gone
            else f"I know of no {missing} here, so nothing was done."
        )[:REPLY_LIMIT]
    return fixes


def _record_wish(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    wish = facts.wish
    if wish is None or raw["refusal"] is not None or wish_written(Plan.model_validate(raw), wish):
        return []
    raw["memory_operations"] = [
        op
        for op in raw["memory_operations"]
        if not (op["op"] == "update_user" and (op["entity"], op["key"]) == (wish.entity, wish.key))
    ]
    write = UpdateUser(op="update_user", entity=wish.entity, key=wish.key, value=wish.value, durable=wish.durable)
    raw["memory_operations"].insert(0, write.model_dump(mode="json"))
    return [f"[wish_remembered] update_user {wish.label}: the user said {wish.why!r}"]


def _record_answers(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    missing = unwritten(Plan.model_validate(raw), facts.answers)
    for said in missing:
        raw["memory_operations"].append(answer_write(said).model_dump(mode="json"))
    return [f"[answer_remembered] update_user {s.obj}.{answer_key(s.kind)}: the user said so" for s in missing]


def _record_observations(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    recorded = {
        op["location"]
        for op in raw["memory_operations"]
        if op["op"] == "update_scene" and op["action"] == "set_contents"
    }
    first = next((e["id"] for e in raw["subtasks"] if e["kind"] in ("vla", "control", "observe")), None)
    fixes = []
    for location in sorted(set(facts.pending_observations) - recorded):
        contents = list(facts.pending_observations[location])
        op = UpdateScene(
            op="update_scene", action="set_contents", location=location, contents=contents, before_subtask=first
        )
        raw["memory_operations"].append(op.model_dump(mode="json"))
        seen = ", ".join(contents) or "nothing"
        fixes.append(f"[observation_updates_scene] added update_scene set_contents {location}: {seen}")
    return fixes


def _observe_first(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    fixes = []
    for entry in list(raw["subtasks"]):
        names = condition_names(entry["condition"]) if entry["condition"] else None
        if not names or any(n not in facts.objects | facts.locations for n in names):
            continue  # not an observable condition, or an unknown name: the LLM's to mend
        by_id = {e["id"]: PlannedSubtask.model_validate(e) for e in raw["subtasks"]}
        before = ancestors(by_id[entry["id"]], by_id)
        if any(by_id[a].kind == "observe" for a in before):
            continue
        location = _where(names, facts)
        observes = [e["id"] for e in raw["subtasks"] if e["kind"] == "observe" and e["id"] not in before]
        safe = [o for o in observes if entry["id"] not in ancestors(by_id[o], by_id) and o != entry["id"]]
        if location is None and len(safe) == 1:  # the plan's only observe step, if that makes no cycle
            entry["depends_on"] = [*entry["depends_on"], safe[0]]
            fixes.append(f"[conditions_observable] {entry['id']} now waits for observe step {safe[0]}")
        elif location is not None:
            new_id = fresh_id(by_id, "look")
            look = PlannedSubtask(
                id=new_id,
                kind="observe",
                objective=f"see whether {entry['condition']}",
                target=location,
                depends_on=list(entry["depends_on"]),
            )
            raw["subtasks"].insert(raw["subtasks"].index(entry), look.model_dump(mode="json"))
            entry["depends_on"] = [*entry["depends_on"], new_id]
            fixes.append(f"[conditions_observable] added observe step {new_id} of {location} before {entry['id']}")
    return fixes


def _observe_before_act(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    fixes = []
    for entry in list(raw["subtasks"]):
        by_id = {e["id"]: PlannedSubtask.model_validate(e) for e in raw["subtasks"]}
        place = unobserved_place(by_id[entry["id"]], by_id, facts)
        if place:
            fixes.append(look_before(raw, entry, place, f"see what is at {place}", "observe_before_act"))
    return fixes


def _search_first(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    fixes = []
    for entry in list(raw["subtasks"]):
        by_id = {e["id"]: PlannedSubtask.model_validate(e) for e in raw["subtasks"]}
        for place in unsearched_places(by_id[entry["id"]], by_id, facts):
            objective = f"look for the {spoken(entry['target'])} at {place}"
            fixes.append(look_before(raw, entry, place, objective, "search_before_act"))
    return fixes


def _reply_from_subtasks(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    vla = [e for e in raw["subtasks"] if e["kind"] == "vla"]
    if raw["refusal"] is not None or all(not e["target"] or mentions(raw["reply"], e["target"]) for e in vla):
        return []
    if any(e["instruction"] not in facts.instructions or e["target"] not in {"", *facts.objects} for e in vla):
        return []  # the steps themselves are wrong: the LLM's to mend, and the reply with them
    raw["reply"] = said_steps(raw)[:REPLY_LIMIT]
    return ["[reply_matches_subtasks] the reply is said anew from the subtasks"]


def _where(names: Iterable[str], facts: PlanningFacts) -> str | None:
    """The location a condition is settled at: one it names, else the one scene memory puts
    its objects at (None when there is none, or more than one)."""
    named = list(names)
    places = {n for n in named if n in facts.locations} or {
        facts.whereabouts[n] for n in named if n in facts.whereabouts
    }
    return next(iter(places)) if len(places) == 1 else None
