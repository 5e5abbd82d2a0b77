"""Did a demo run tell the whole story? `python -m carryon_bringup.story RUN_DIR...`

The demo (`make demo`) is the paper's integrated scenario: a remembered vegetarian user
asks "Serve me food"; the meat is refused (or left out, never acted on) and recorded in
scene memory, the pink cover is opened, the carrot is served only if it is underneath,
the shield blocks unsafe steps, an injected drop is recovered and the task resumes to
the bowl, and nothing is touched that a subtask does not permit (the simulator's contact
monitor, by the rules of carryon_common.core.contact_rules). Each event is looked up in
the run's audit log (the decisions), its transcript (what the operator saw, the injected
perturbation) and its report's metrics.json (the unpermitted contacts); the run folder
must hold every artefact. Prints one line per event and writes `story.json`; exit status
0 only when every event is there.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from carryon_common.core.audit import verify

ARTEFACTS = ("resolved_config.yaml", "events.jsonl", "metrics.json", "report.md", "report.png", "audit.jsonl")


@dataclass(frozen=True)
class StoryEvent:
    name: str
    seen: bool
    evidence: str


@dataclass(frozen=True)
class _Run:
    folder: Path
    transcript: list[str]
    audit: list[dict[str, Any]]

    def entries(self, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.audit if e.get("kind") == kind]

    def line(self, needle: str, after: int = -1) -> int:
        """Index of the first transcript line after `after` containing `needle`; -1 if none."""
        return next((i for i, line in enumerate(self.transcript) if i > after and needle in line), -1)


def _load(folder: Path) -> _Run:
    transcript_file, audit_file = folder / "transcript.txt", folder / "audit.jsonl"
    transcript = transcript_file.read_text(encoding="utf-8").splitlines() if transcript_file.is_file() else []
    audit = []
    if audit_file.is_file():
        for raw in audit_file.read_text(encoding="utf-8").splitlines():
            try:
                audit.append(json.loads(raw))
            except json.JSONDecodeError:
                continue  # a torn line: the chain check below reports it
    return _Run(folder, transcript, audit)


def _first(items: Sequence[dict[str, Any]], test: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    return next((item for item in items if test(item)), None)


def _subtasks(plan: Any) -> list[dict[str, Any]]:
    """The subtasks of a plan as the audit log holds it (JSON text); none if unreadable."""
    try:
        steps = json.loads(plan).get("subtasks", []) if isinstance(plan, str) else []
    except (json.JSONDecodeError, AttributeError):
        return []
    return [s for s in steps if isinstance(s, dict) and "id" in s]


def _event(name: str, found: Any, evidence: str, missing: str) -> StoryEvent:
    return StoryEvent(name, bool(found), evidence if found else missing)


def _no_unpermitted_contact(folder: Path) -> StoryEvent:
    """Nothing touched that a subtask does not permit, from the report's metrics.json
    (`carryon report` runs first): the count sim_node published and the contacts it listed."""
    name = "nothing is touched that a subtask does not permit"
    try:
        figures = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return StoryEvent(name, False, "no readable metrics.json (run `carryon report` first)")
    count = figures.get("unpermitted_contacts")
    listed = figures.get("unpermitted_contact_list") or []
    if count is None:
        return StoryEvent(name, False, "no count of unpermitted contacts (sim/truth was not recorded)")
    if count == 0 and not listed:
        return StoryEvent(name, True, "0 unpermitted contacts (simulator contact monitor)")
    shown = "; ".join(
        f"{v['mover']} → {v['touched']} at {v['start_s']} s during {v['subtask'] or '(no subtask)'}" for v in listed[:3]
    )
    more = f" (+{len(listed) - 3} more)" if len(listed) > 3 else ""
    return StoryEvent(name, False, f"{max(count, len(listed))} unpermitted contact(s): {shown or 'not listed'}{more}")


def check_story(folder: Path) -> list[StoryEvent]:
    """Every event of the demo's story, found in the run folder or not (with why)."""
    run = _load(folder)
    events: list[StoryEvent] = []
    remembered = run.line("- preference: vegetarian")
    events.append(
        _event(
            "the user is remembered as vegetarian",
            remembered >= 0,
            "memory shows '- preference: vegetarian'",
            "no vegetarian preference shown",
        )
    )
    messages = [d.get("message", "") for d in run.entries("plan.validation")]
    said = ("preference_conflict", "left out for the user's preferences")  # refused in a plan, or never proposed
    parts = (part for m in messages for part in m.split("; "))  # the validator's message: one finding per part
    refusal = next((p for p in parts if "meat" in p and any(s in p for s in said)), "")
    steps = [s for d in run.entries("plan") for s in _subtasks(d.get("plan"))]
    meat = {s["id"] for s in steps if s.get("target") == "meat"}
    moved = _first(run.entries("subtask"), lambda d: d.get("state") == "active" and d.get("subtask") in meat)
    events.append(
        _event(
            "the meat is refused for her",
            refusal and not moved,
            refusal[:160],
            f"a subtask on the meat ran: {moved['subtask']}" if moved else "the audit never says the meat is ruled out",
        )
    )
    recorded = _first(run.entries("memory.change"), lambda d: "meat" in str(d.get("new", "")))
    events.append(
        _event(
            "the meat is recorded in scene memory",
            recorded,
            f"{recorded and recorded['entity']}: {recorded and recorded['new']}",
            "no scene-memory change mentioning the meat",
        )
    )
    conditional = next((s for s in steps if s.get("target") == "carrot" and s.get("condition")), None)
    events.append(
        _event(
            "the carrot is served only if it is under the cover",
            conditional,
            f"{conditional and conditional['id']}: if {conditional and conditional['condition']!r}",
            "no plan step for the carrot with a condition",
        )
    )

    def succeeded(target: str) -> dict[str, Any] | None:
        ids = {s["id"] for s in steps if s.get("target") == target and s.get("kind") != "observe"}
        return _first(run.entries("subtask"), lambda d: d.get("state") == "succeeded" and d.get("subtask") in ids)

    opened = succeeded("pink_cover")
    events.append(
        _event(
            "the pink cover is opened",
            opened,
            str(opened and opened["message"])[:120],
            "the subtask opening the pink cover never succeeded",
        )
    )
    blocks = run.entries("shield.block")
    events.append(
        _event(
            "the shield blocks unsafe steps",
            blocks,
            f"{len(blocks)} shield decisions logged",
            "no shield block in the audit log",
        )
    )
    drop = run.line("drop applied")
    events.append(
        _event(
            "the carrot is dropped (injected)",
            drop >= 0,
            "transcript: perturbation: drop applied",
            "the drop was never applied",
        )
    )
    recovery = run.line("recovery attempt", after=drop) if drop >= 0 else -1
    logged = _first(run.entries("recovery"), lambda d: "recovery attempt" in d.get("message", ""))
    events.append(
        _event(
            "recovery re-grasps after the drop",
            recovery >= 0 and logged,
            run.transcript[recovery].strip() if recovery >= 0 else "",
            "no recovery attempt after the drop",
        )
    )
    served = succeeded("carrot")
    resumed = served is not None and recovery >= 0 and run.line(f"{served['subtask']} succeeded", after=recovery) >= 0
    events.append(
        _event(
            "the task resumes and the carrot ends in the bowl",
            served and resumed,
            str(served and served["message"]),
            "the carrot never reached the bowl after the recovery",
        )
    )
    events.append(_no_unpermitted_contact(folder))
    check = verify(folder / "audit.jsonl")
    events.append(
        _event(
            "the audit log's hash chain holds",
            check.ok and check.entries > 0,
            f"{check.entries} entries, chain intact",
            f"audit log: {check.problem or 'empty'}",
        )
    )
    missing = [name for name in ARTEFACTS if not (folder / name).is_file()]
    if not any((folder / "bag").glob("*.mcap")):
        missing.append("bag/*.mcap")
    events.append(
        _event(
            "the run folder holds config, events, bag, metrics, report",
            not missing,
            ", ".join((*ARTEFACTS, "bag/*.mcap")),
            f"missing: {', '.join(missing)}",
        )
    )
    return events


def main(argv: Sequence[str] | None = None) -> int:
    folders = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not folders:
        print("usage: python -m carryon_bringup.story RUN_DIR...", file=sys.stderr)
        return 2
    complete = 0
    for folder in folders:
        if not folder.is_dir():
            print(f"{folder}: not a run folder", file=sys.stderr)
            continue
        events = check_story(folder)
        seen = sum(e.seen for e in events)
        complete += seen == len(events)
        print(f"Story of {folder}: {seen}/{len(events)} events")
        for event in events:
            print(f"  [{'x' if event.seen else ' '}] {event.name}: {event.evidence}")
        (folder / "story.json").write_text(json.dumps([asdict(e) for e in events], indent=1) + "\n", encoding="utf-8")
    if len(folders) > 1:
        print(f"{complete} of {len(folders)} runs told the whole story")
    return 0 if complete == len(folders) else 1


if __name__ == "__main__":
    sys.exit(main())
