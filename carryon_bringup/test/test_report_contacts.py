"""`carryon report` lists every unpermitted contact: mover → touched, when, during which subtask."""

from __future__ import annotations

import json
from pathlib import Path

from carryon_bringup.report import RunData, metrics, read_run, violation_lines
from carryon_common.core.contact_rules import VIOLATIONS_FILE, Violation

PLAN = {"subtasks": [{"id": "s2", "instruction": "open the pink cover"}, {"id": "s4", "objective": "carrot in bowl"}]}


def test_the_report_lists_each_unpermitted_contact(tmp_path: Path) -> None:
    (tmp_path / VIOLATIONS_FILE).write_text(
        Violation(41.0, "carrot", "plate", "s4", 2.5, 41.3).to_json()
        + "\n"
        + Violation(22.6, "robot", "plate", "s2", 12.0, 22.9).to_json()
        + "\n"
    )
    data = read_run(tmp_path)
    data.collisions = 3  # sim/truth counted one more (still under way when sim_node stopped)
    data.audit = [{"kind": "plan", "time": "2026-12-01T10:00:00.000000Z", "data": {"plan": json.dumps(PLAN)}}]
    figures = metrics(data, tmp_path)
    assert [(v["mover"], v["touched"], v["start_s"], v["subtask"]) for v in figures["unpermitted_contact_list"]] == [
        ("robot", "plate", 22.6, "s2"),
        ("carrot", "plate", 41.0, "s4"),
    ]
    lines = violation_lines(figures)
    assert lines[0] == "robot → plate at 22.6–22.9 s sim time during s2 (open the pink cover), 12.0 N"
    assert lines[1].endswith("during s4 (carrot in bowl), 2.5 N")
    assert lines[2].startswith("1 more counted by sim_node")


def test_a_clean_run_lists_none() -> None:
    figures = metrics(RunData(collisions=0), Path("nowhere"))
    assert figures["unpermitted_contacts"] == 0 and violation_lines(figures) == []
