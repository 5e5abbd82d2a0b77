"""Edits of a plan in its JSON form (`Plan.model_dump(mode="json")`), shared by the
deterministic repairs (core/mend.py, core/mend_usual.py, core/ask_back.py) and the choice of
a family's members (core/choose.py): drop subtasks and keep the graph whole, insert steps,
make a step wait for a look, find the steps that handle an object, and say the reply anew
from the steps."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from carryon_planner.core.plan import Plan, PlannedSubtask, ancestors

T = TypeVar("T")

REPLY_LIMIT: int = Plan.model_json_schema()["properties"]["reply"]["maxLength"]


def spoken(name: str) -> str:
    return name.replace("_", " ")


def said_steps(raw: dict[str, Any]) -> str:
    """The reply a plan's observe and VLA subtasks say, in order ("I will look at ...")."""
    steps = [
        f"look at the {spoken(e['target'])}" if e["kind"] == "observe" else e["instruction"]
        for e in raw["subtasks"]
        if e["kind"] in ("observe", "vla")
    ]
    return f"I will {', then '.join(steps)}."


def said_anew(raw: dict[str, Any]) -> str:
    """The reply said anew from the plan's steps, keeping what it said was left out and why."""
    left_out = re.search(r"Left out because of your preferences: .*", raw["reply"])
    return " ".join([said_steps(raw), left_out.group(0) if left_out else ""]).strip()[:REPLY_LIMIT]


def drop(raw: dict[str, Any], dropped: set[str]) -> None:
    """Remove the `dropped` subtasks; a remaining subtask that waited for one waits for
    what that one waited for instead, and a scene update due before one is due at once."""
    by_id = {e["id"]: e for e in raw["subtasks"]}

    def inherited(ids: list[str]) -> list[str]:
        out: list[str] = []
        for dep in ids:
            for kept in inherited(by_id[dep]["depends_on"]) if dep in dropped else [dep]:
                if kept not in out:
                    out.append(kept)
        return out

    raw["subtasks"] = [e for e in raw["subtasks"] if e["id"] not in dropped]
    for entry in raw["subtasks"]:
        entry["depends_on"] = inherited(entry["depends_on"])
    for op in raw["memory_operations"]:
        if op.get("before_subtask") in dropped:
            op["before_subtask"] = None


def fresh_id(taken: Iterable[str], stem: str) -> str:
    used = set(taken)
    return next(f"{stem}{n}" for n in range(1, len(used) + 2) if f"{stem}{n}" not in used)


def insert_after(raw: dict[str, Any], anchor: str | None, new: list[PlannedSubtask]) -> None:
    """Put the chain `new` right after `anchor` (first when None): it waits for the anchor
    and what waited for the anchor waits for the chain's end."""
    position = next((n + 1 for n, e in enumerate(raw["subtasks"]) if e["id"] == anchor), 0)
    for entry in raw["subtasks"]:
        if anchor is not None and anchor in entry["depends_on"]:
            entry["depends_on"] = [new[-1].id if d == anchor else d for d in entry["depends_on"]]
    raw["subtasks"][position:position] = [s.model_dump(mode="json") for s in new]


def handles(entry: dict[str, Any], names: set[str]) -> bool:
    """Whether a subtask acts on, takes from or puts into one of `names` (spoken form)."""
    return mentioned(" ".join(entry[k] for k in ("instruction", "target", "source", "destination", "condition")), names)


def flagged(raw: dict[str, Any], check: Callable[[PlannedSubtask], T | None]) -> dict[str, T]:
    """Subtask id -> what `check` found in it, for the subtasks where it found something."""
    found = {e["id"]: check(PlannedSubtask.model_validate(e)) for e in raw["subtasks"]}
    return {i: f for i, f in found.items() if f is not None}


def with_followers(raw: dict[str, Any], dropped: set[str], names: set[str]) -> set[str]:
    """`dropped` and every subtask after one of them that handles one of `names` (spoken form)."""
    out = set(dropped)
    while True:
        more = {e["id"] for e in raw["subtasks"] if set(e["depends_on"]) & out and handles(e, names)} - out
        if not more:
            return out
        out |= more


def mentioned(text: str, names: set[str]) -> bool:
    said = spoken(text).lower()
    return any(re.search(rf"\b{re.escape(name)}\b", said) for name in names if name)


def look_before(raw: dict[str, Any], entry: dict[str, Any], place: str, objective: str, check: str) -> str:
    """Make `entry` wait for an observe step of `place`: the plan's own one that does not
    wait for it, else a new one inserted before it; returns the fix's line for the log."""
    by_id = {e["id"]: PlannedSubtask.model_validate(e) for e in raw["subtasks"]}
    looks = [
        e["id"]
        for e in raw["subtasks"]
        if e["kind"] == "observe" and e["target"] == place and entry["id"] not in ancestors(by_id[e["id"]], by_id)
    ]
    if looks:
        entry["depends_on"] = [*entry["depends_on"], looks[0]]
        return f"[{check}] {entry['id']} now waits for observe step {looks[0]} of {place}"
    new_id = fresh_id(by_id, "look")
    look = PlannedSubtask(
        id=new_id, kind="observe", objective=objective, target=place, depends_on=list(entry["depends_on"])
    )
    raw["subtasks"].insert(raw["subtasks"].index(entry), look.model_dump(mode="json"))
    entry["depends_on"] = [*entry["depends_on"], new_id]
    return f"[{check}] added observe step {new_id} of {place} before {entry['id']}"
