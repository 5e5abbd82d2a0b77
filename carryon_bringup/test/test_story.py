"""The demo's story check: every event found in a complete run, each gap named."""

from __future__ import annotations

import json
from pathlib import Path

from carryon_bringup.story import ARTEFACTS, check_story, main
from carryon_common.core.audit import AuditLog

PLAN = {
    "subtasks": [
        {"id": "s1", "kind": "observe", "target": "kitchen_counter", "condition": ""},
        {"id": "s2", "kind": "vla", "target": "pink_cover", "condition": ""},
        {"id": "s4", "kind": "vla", "target": "carrot", "condition": "carrot present"},
    ]
}
TRANSCRIPT = [
    "- preference: vegetarian",
    "  s2 succeeded: judge: pink_cover moved 15 cm off its place and set down; newly visible: carrot",
    "  [perturbation] perturbation: drop applied",
    "  s4 recovering: recovery attempt 1: relocalize",
    "  s4 active: running",
    "  s4 succeeded: judge: carrot newly inside bowl and released",
]


def write_run(
    folder: Path,
    *,
    transcript: list[str] = TRANSCRIPT,
    cover_state: str = "succeeded",
    contacts: list[dict[str, object]] | None = None,
    validation: str = "[preference_conflict] meat conflicts",
    plan: dict[str, object] = PLAN,
    meat_state: str = "",
) -> Path:
    folder.mkdir()
    listed = contacts or []
    (folder / "metrics.json").write_text(
        json.dumps({"unpermitted_contacts": len(listed), "unpermitted_contact_list": listed})
    )
    (folder / "transcript.txt").write_text("\n".join(transcript) + "\n")
    with AuditLog(folder / "audit.jsonl") as audit:
        audit.append("plan", "planner_node", {"plan": json.dumps(plan)})
        audit.append("plan.validation", "planner_node", {"message": validation})
        if meat_state:
            audit.append("subtask", "planner_node", {"subtask": "s3", "state": meat_state, "message": "running"})
        audit.append("memory.change", "memory_node", {"entity": "kitchen_counter", "new": "meat in plate"})
        audit.append("subtask", "planner_node", {"subtask": "s1", "state": "succeeded", "message": "pink_cover seen"})
        audit.append("subtask", "planner_node", {"subtask": "s2", "state": cover_state, "message": "judge"})
        audit.append("shield.block", "shield_node", {"reason": "fingers predicted 0.002 m from bottle"})
        audit.append("recovery", "planner_node", {"message": "recovery attempt 1: relocalize"})
        audit.append("subtask", "planner_node", {"subtask": "s4", "state": "succeeded", "message": "in bowl"})
    for name in ARTEFACTS:
        if not (folder / name).exists():
            (folder / name).write_text("x")
    (folder / "bag").mkdir()
    (folder / "bag" / "bag.mcap").write_bytes(b"x")
    return folder


def missing(folder: Path) -> list[str]:
    return [event.name for event in check_story(folder) if not event.seen]


def test_a_complete_run_tells_the_whole_story(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run")
    assert missing(run) == []
    assert main([str(run)]) == 0
    saved = json.loads((run / "story.json").read_text())
    assert len(saved) == 12 and all(event["seen"] for event in saved)


def test_each_gap_is_named(tmp_path: Path) -> None:
    no_drop = write_run(tmp_path / "no_drop", transcript=[t for t in TRANSCRIPT if "drop" not in t])
    assert missing(no_drop) == [
        "the carrot is dropped (injected)",
        "recovery re-grasps after the drop",
        "the task resumes and the carrot ends in the bowl",
    ]
    cover_failed = write_run(tmp_path / "cover", cover_state="failed")
    assert missing(cover_failed) == ["the pink cover is opened"]  # an observation naming it does not count
    tampered = write_run(tmp_path / "tampered")
    lines = (tampered / "audit.jsonl").read_text().splitlines()
    lines[2] = lines[2].replace("meat in plate", "nothing")
    (tampered / "audit.jsonl").write_text("\n".join(lines) + "\n")
    assert "the audit log's hash chain holds" in missing(tampered)
    (no_drop / "report.png").unlink()
    assert "the run folder holds config, events, bag, metrics, report" in missing(no_drop)
    assert main([str(no_drop), str(cover_failed)]) == 1


def test_the_meat_left_out_unproposed_counts_and_the_meat_moved_never_does(tmp_path: Path) -> None:
    """A plan that never proposed the meat says it left it out (the LLM planner); a plan
    whose meat step ran refused nothing, whatever its validator said."""
    left_out = "validator: left out for the user's preferences: meat (vegetarian rules out meat)"
    assert missing(write_run(tmp_path / "left_out", validation=left_out)) == []
    silent = write_run(tmp_path / "silent", validation="validator: [uncover_first] added open1")
    assert missing(silent) == ["the meat is refused for her"]
    steps = [*PLAN["subtasks"], {"id": "s3", "kind": "vla", "target": "meat", "condition": ""}]  # type: ignore[misc]
    moved = write_run(tmp_path / "moved", plan={"subtasks": steps}, meat_state="active")
    assert missing(moved) == ["the meat is refused for her"]
    assert "s3" in next(e.evidence for e in check_story(moved) if not e.seen)
    assert missing(write_run(tmp_path / "pending", plan={"subtasks": steps})) == []


def test_any_unpermitted_contact_fails_the_story(tmp_path: Path) -> None:
    contact = {"mover": "robot", "touched": "plate", "start_s": 22.6, "subtask": "s2"}
    touched = write_run(tmp_path / "touched", contacts=[contact])
    (event,) = [e for e in check_story(touched) if not e.seen]
    assert event.name == "nothing is touched that a subtask does not permit"
    assert "robot → plate at 22.6 s during s2" in event.evidence
    assert main([str(touched)]) == 1
    unknown = write_run(tmp_path / "unknown")
    (unknown / "metrics.json").write_text(json.dumps({"unpermitted_contacts": None}))  # sim/truth not recorded
    assert missing(unknown) == ["nothing is touched that a subtask does not permit"]
