"""The run report names subtasks by their instruction, and its object labels do not overlap."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from carryon_bringup.core.labels import intersects, place_labels
from carryon_bringup.report import RunData, figure, metrics, subtask_objectives, subtask_spans

PLANS = [
    {"subtasks": [{"id": "s1", "kind": "observe", "instruction": "", "objective": "see the counter"}]},
    {
        "subtasks": [
            {"id": "s1", "kind": "observe", "instruction": "", "objective": "look again"},
            {"id": "s2", "kind": "vla", "instruction": "open the pink cover", "objective": "cover off"},
        ]
    },
]


def _entry(kind: str, second: int, data: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "time": f"2026-12-01T10:00:{second:02d}.000000Z", "data": data}


AUDIT = [
    _entry("plan", 0, {"plan": json.dumps(PLANS[0])}),
    _entry("subtask", 1, {"subtask": "s1", "state": "active", "message": "running"}),
    _entry("subtask", 2, {"subtask": "s1", "state": "succeeded", "message": "seen"}),
    _entry("plan", 3, {"plan": json.dumps(PLANS[1])}),
    _entry("subtask", 4, {"subtask": "s1", "state": "active", "message": "running"}),
    _entry("subtask", 5, {"subtask": "s1", "state": "succeeded", "message": "seen"}),
    _entry("subtask", 6, {"subtask": "s2", "state": "active", "message": "running"}),
    _entry("subtask", 9, {"subtask": "s2", "state": "succeeded", "message": "judge: cover off"}),
]


def _boxes(anchors: list[tuple[float, float]], sizes: list[tuple[float, float]]) -> list[tuple[float, ...]]:
    offsets = place_labels(anchors, sizes)
    return [
        (x + dx, y + dy, x + dx + w, y + dy + h)
        for (x, y), (dx, dy), (w, h) in zip(anchors, offsets, sizes, strict=True)
    ]


def test_labels_on_one_point_are_spread_apart() -> None:
    anchors = [(100.0, 100.0)] * 5 + [(104.0, 98.0), (300.0, 50.0)]
    sizes = [(40.0, 10.0), (25.0, 10.0), (60.0, 12.0), (30.0, 10.0), (30.0, 10.0), (50.0, 10.0), (20.0, 10.0)]
    boxes = _boxes(anchors, sizes)
    assert not any(intersects(a, b) for a, b in itertools.combinations(boxes, 2))
    assert boxes[-1] == (303.0, 53.0, 323.0, 63.0)  # a label alone keeps the first place: above right


def test_mismatched_anchor_and_size_lists_are_refused() -> None:
    with pytest.raises(ValueError, match="2 anchors but 1 sizes"):
        place_labels([(0.0, 0.0), (1.0, 1.0)], [(5.0, 5.0)])


def test_the_reports_object_labels_do_not_overlap() -> None:
    data = RunData(
        path=[(0.0, 0.4, 0.1, 0.5), (1.0, 0.5, 0.0, 0.5), (2.0, 0.55, -0.3, 0.5)],
        objects={"plate": (0.55, 0.47), "meat": (0.55, 0.47), "pink_cover": (0.55, 0.3), "carrot": (0.55, 0.3)}
        | {"bottle": (0.55, 0.02), "bowl": (0.55, -0.3)},
        audit=AUDIT,
    )
    fig = figure(data, subtask_spans(data.audit))
    fig.canvas.draw()
    top, timeline = fig.axes
    labels = [t for t in top.texts if t.get_text() in data.objects]
    assert len(labels) == 6
    boxes = [label.get_window_extent() for label in labels]
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2))
    ticks = [t.get_text() for t in timeline.get_yticklabels()]
    assert ticks == ["plan 1 · s1\nsee the counter", "plan 2 · s1\nlook again", "plan 2 · s2\nopen the pink cover"]


def test_the_metrics_name_each_subtask_by_its_plans_instruction() -> None:
    figures = metrics(RunData(audit=AUDIT), Path("nowhere"))
    assert [(s["plan"], s["id"], s["instruction"]) for s in figures["subtasks"]] == [
        (1, "s1", "see the counter"),
        (2, "s1", "look again"),
        (2, "s2", "open the pink cover"),
    ]
    assert subtask_objectives(AUDIT) == {"s1": "look again", "s2": "open the pink cover"}  # the latest plan's
