"""The deterministic repairs core/mend.py takes from where things are (issue 20): an object
placed nowhere is looked for where memory holds nothing (`search_before_act`), and in a
replan after a look what was not seen is not acted on, nor a needless cover opened
(`act_on_what_is_there`; core/scene_checks.py)."""

from __future__ import annotations

from typing import Any

from carryon_planner.core.mend_usual import REPLY_LIMIT, drop, handles, look_before, said_steps, spoken
from carryon_planner.core.plan import PlannedSubtask
from carryon_planner.core.scene_checks import needless_uncover, nowhere, unsearched_places
from carryon_planner.core.validator import PlanningFacts


def drop_not_there(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    by_id = {e["id"]: PlannedSubtask.model_validate(e) for e in raw["subtasks"]}
    gone = {i for i, s in by_id.items() if s.kind == "vla" and s.target in facts.gone}
    unknown = {i for i, s in by_id.items() if nowhere(s, facts)}
    needless = {i for i, s in by_id.items() if needless_uncover(s, by_id, facts)}
    if not gone | unknown | needless:
        return []
    names = {spoken(by_id[i].target) for i in gone | unknown}
    dropped = gone | unknown | needless
    while True:  # and what comes after a dropped subtask and handles the same thing
        more = {e["id"] for e in raw["subtasks"] if set(e["depends_on"]) & dropped and handles(e, names)} - dropped
        if not more:
            break
        dropped |= more
    drop(raw, dropped)
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


def search_first(raw: dict[str, Any], facts: PlanningFacts) -> list[str]:
    fixes = []
    for entry in list(raw["subtasks"]):
        by_id = {e["id"]: PlannedSubtask.model_validate(e) for e in raw["subtasks"]}
        for place in unsearched_places(by_id[entry["id"]], by_id, facts):
            objective = f"look for the {spoken(entry['target'])} at {place}"
            fixes.append(look_before(raw, entry, place, objective, "search_before_act"))
    return fixes
