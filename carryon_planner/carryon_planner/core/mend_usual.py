"""The deterministic repairs core/mend.py takes from memory and the library's families
(core/usual.py); the edits they make are core/plan_edits.py's."""

from __future__ import annotations

from typing import Any

from carryon_planner.core.plan import PlannedSubtask, UpdateScene
from carryon_planner.core.plan_edits import REPLY_LIMIT, drop, fresh_id, insert_after, said_anew, spoken
from carryon_planner.core.steps import named_in, vla_subtask
from carryon_planner.core.usual import (
    copied_beside,
    cover_to_open,
    crowded_family,
    missing_base,
    recorded,
    repeats,
    slot,
    usual_items,
    usual_unknown,
)
from carryon_planner.core.validator import PlanningFacts


def _subtasks(raw: dict[str, Any]) -> list[PlannedSubtask]:
    return [PlannedSubtask.model_validate(e) for e in raw["subtasks"]]


def drop_repeats(raw: dict[str, Any], _facts: PlanningFacts) -> list[str]:
    by_id = {s.id: s for s in _subtasks(raw)}
    repeated = {i for i, s in by_id.items() if repeats(s, by_id)}
    if repeated:
        drop(raw, repeated)
        return [f"[repeated_step] dropped {', '.join(sorted(repeated))}: the step before it, again"]
    return []


def follow_memory(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    names = sorted(facts.objects)
    gap = usual_items(
        _subtasks(raw),
        facts.remembered,
        instructions=facts.instructions,
        names=names,
        request=facts.request,
        ruled_out=facts.ruled_out,
    )
    if gap is None or not gap.chosen:
        return []
    drop(raw, set(gap.extra))
    kept = _subtasks(raw)
    family = [s.id for s in kept if s.kind == "vla" and s.instruction in gap.wanted.values()]
    base = [s.id for s in kept if s.kind == "vla" and s.target and named_in(gap.family, [s.target])]
    anchors = family or base or [s.id for s in kept]
    anchor = anchors[-1] if anchors else None
    new: list[PlannedSubtask] = []
    taken = {s.id for s in kept}
    for name in gap.missing:
        new_id = fresh_id(taken | {s.id for s in new}, "use")
        after = [new[-1].id] if new else ([anchor] if anchor else [])
        new.append(
            vla_subtask(gap.wanted[name], names, facts.whereabouts, facts.skill_objects, id=new_id, depends_on=after)
        )
    if new:
        insert_after(raw, anchor, new)
    raw["reply"] = said_anew(raw)
    said = "; ".join(gap.facts)
    fixes = [f"[follows_memory] dropped {', '.join(gap.extra)}: not in {said}"] if gap.extra else []
    return [*fixes, f"[follows_memory] added {', '.join(s.id for s in new)}: {said}"] if new else fixes


def uncover(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    fixes = []
    for entry in list(raw["subtasks"]):
        by_id = {s.id: s for s in _subtasks(raw)}
        found = cover_to_open(
            by_id[entry["id"]],
            by_id,
            covers=facts.covers,
            instructions=facts.instructions,
            declared=facts.skill_objects,
            names=sorted(facts.objects),
        )
        if found is None:
            continue
        cover, opening = found
        new_id = fresh_id(by_id, "open")
        step = vla_subtask(
            opening,
            sorted(facts.objects),
            facts.whereabouts,
            facts.skill_objects,
            id=new_id,
            depends_on=list(entry["depends_on"]),
            condition=f"{entry['target']} under {cover}",
        )
        raw["subtasks"].insert(raw["subtasks"].index(entry), step.model_dump(mode="json"))
        entry["depends_on"] = [new_id]
        fixes.append(
            f"[uncover_first] added {new_id} {opening!r} before {entry['id']}: {entry['target']} under {cover}"
        )
    return fixes


def ask_instead(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    """A plan that copies most of a large family is not carried out: the reply asks which
    ones, with what the user's memory says about the request if it says anything. (The
    1.5B model packs the whole shelf for "pack my bag for work", and asked again in a
    repair round, packs it again; following memory here would serve a model that always
    answers "everything" as if it had chosen: core/choose.py asks the model instead.)"""
    names = sorted(facts.objects)
    subtasks = _subtasks(raw)
    crowded = crowded_family(
        subtasks, instructions=facts.instructions, names=names, request=facts.request, remembered=facts.remembered
    )
    if crowded is None:
        return []
    family = crowded[0]
    offered = [found[1] for i in facts.instructions if (found := slot(i, names)) and found[0] == family]
    gap = usual_items(subtasks, facts.remembered, instructions=facts.instructions, names=names, request=facts.request)
    raw["subtasks"] = []
    for op in raw["memory_operations"]:
        if "before_subtask" in op:
            op["before_subtask"] = None
    options = ", ".join(spoken(o) for o in offered)
    remembered = f" Your memory says {'; '.join(gap.facts)}: those?" if gap is not None else ""
    question = f"Which ones do you want ({family.replace('{}', '...')})?{remembered} I can use: {options}."
    raw["reply"] = f"{question} I did not want to guess."[:REPLY_LIMIT]
    did = f"the plan did {crowded[1]} of {crowded[2]}"
    return [f"[acts_on_what_is_needed] nothing dispatched: {did}; the user is asked which ones"]


def drop_copied_beside(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    """A family the request asks none of, copied beside the one it names a fact for, is
    left out (the sandwich is made; the four drinks beside it are not poured)."""
    beside = copied_beside(
        _subtasks(raw),
        instructions=facts.instructions,
        names=sorted(facts.objects),
        request=facts.request,
        remembered=facts.remembered,
    )
    if beside is None:
        return []
    drop(raw, set(beside[1]))
    raw["reply"] = said_anew(raw)
    family = beside[0].replace("{}", "...")
    return [f"[acts_on_what_is_needed] dropped {', '.join(beside[1])}: the request asks for no '{family}'"]


def base_first(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    """The step that sets out what the remembered family builds on (the bread on the plate)
    is put before the plan's first step in that family."""
    names = sorted(facts.objects)
    found = missing_base(_subtasks(raw), instructions=facts.instructions, names=names, remembered=facts.remembered)
    if found is None:
        return []
    instruction, first = found
    entry = next(e for e in raw["subtasks"] if e["id"] == first)
    new_id = fresh_id((e["id"] for e in raw["subtasks"]), "base")
    step = vla_subtask(
        instruction, names, facts.whereabouts, facts.skill_objects, id=new_id, depends_on=list(entry["depends_on"])
    )
    raw["subtasks"].insert(raw["subtasks"].index(entry), step.model_dump(mode="json"))
    entry["depends_on"] = [new_id]
    raw["reply"] = said_anew(raw)
    return [f"[follows_memory] added {new_id} {instruction!r} before {first}: what it builds on"]


def ask_usual(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    """A request for the user's usual that memory knows nothing about is not guessed at:
    nothing moves, and the reply asks what they would like."""
    moving = {e["id"] for e in raw["subtasks"] if e["kind"] in ("vla", "control")}
    if not moving or not usual_unknown(facts.request, facts.remembered, facts.objects):
        return []
    drop(raw, moving)
    raw["subtasks"] = [e for e in raw["subtasks"] if e["kind"] != "observe"]  # a look for nothing in particular
    raw["reply"] = (
        "I have nothing on record about your usual, so I did not guess. Tell me what you would like "
        "(and say 'remember that' if it should be your usual from now on)."
    )[:REPLY_LIMIT]
    return [f"[usual_known] dropped {', '.join(sorted(moving))}: memory holds no usual for this user to serve"]


def record_stated(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    """What the request says about where an object is now is written to scene memory at
    once (a move_item the plan made for it elsewhere is corrected)."""
    fixes = []
    for item, place in sorted(facts.stated.items()):
        ops = raw["memory_operations"]
        if any(recorded(UpdateScene.model_validate(op), item, place) for op in ops if op["op"] == "update_scene"):
            continue
        raw["memory_operations"] = [
            op for op in ops if not (op["op"] == "update_scene" and op["action"] == "move_item" and op["item"] == item)
        ]
        move = UpdateScene(op="update_scene", action="move_item", item=item, location=place)
        raw["memory_operations"].insert(0, move.model_dump(mode="json"))
        fixes.append(f"[stated_move_recorded] added update_scene move_item {item} -> {place}: the user said so")
    return fixes
