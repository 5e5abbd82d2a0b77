"""`carryon report RUN_DIR`: the report of one run, from what recorder_node left there.

Reads the rosbag2 (`bag/`) and the audit log (`audit.jsonl`) and writes
* `metrics.json`: duration, the request's outcome, per-subtask state / attempts / time,
  shield decisions by kind, recoveries, memory changes, unpermitted contacts (simulator:
  their count from `sim/truth`, and each one — mover → touched, when, during which
  subtask, how hard — from sim_node's `contact_violations.jsonl`), and the audit log's
  entry count and last hash (to check its tail later:
  `carryon audit verify audit.jsonl --last HASH`);
* `report.png`: top-down tool path (tool positions from `ee_pose`) with the places the
  shield released only a prefix, retreated or rejected, the scene's objects (labels placed
  clear of each other), and a timeline of subtasks, each named by its instruction (active,
  recovering, outcome);
* `report.md`: the above in words, with the plot (and `animation.gif`, when
  `carryon report --animation` made one: `carryon_bringup.report_animation`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from ament_index_python.packages import get_package_share_directory
from rosbags.rosbag2 import Reader

from carryon_bringup.core.labels import place_labels
from carryon_bringup.core.recorder import typestore_for
from carryon_bringup.report_animation import ANIMATION_FILE
from carryon_common.core.audit import verify
from carryon_common.core.contact_rules import VIOLATIONS_FILE, Violation, read_violations
from carryon_shield.core.gate import Decision

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

_NAME_CHARS = 34  # a subtask's instruction is cut to this many characters on the timeline

_LABEL_BOX = {"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.75}  # readable over the path
_MARKERS = {"released_prefix": ("o", "tab:orange"), "retreat": ("^", "tab:red")}


@dataclass
class RunData:
    path: list[tuple[float, float, float, float]] = field(default_factory=list)  # (t, x, y, z)
    blocks: list[tuple[float, str, str]] = field(default_factory=list)  # (t, decision, reason)
    objects: dict[str, tuple[float, float]] = field(default_factory=dict)  # first seen x, y
    collisions: int | None = None
    violations: list[Violation] = field(default_factory=list)  # sim_node's record, in start order
    audit: list[dict[str, Any]] = field(default_factory=list)


def read_run(run_dir: Path) -> RunData:
    data = RunData()
    bag = run_dir / "bag"
    if bag.is_dir():
        store = typestore_for([Path(get_package_share_directory("carryon_interfaces"))])
        with Reader(bag) as reader:
            wanted = [c for c in reader.connections if c.topic.endswith(("/ee_pose", "/shield/events", "/sim/truth"))]
            for connection, stamp, raw in reader.messages(connections=wanted):
                msg = store.deserialize_cdr(raw, connection.msgtype)
                t = stamp * 1e-9
                if connection.topic.endswith("/ee_pose"):
                    p = msg.pose.position
                    data.path.append((t, p.x, p.y, p.z))
                elif connection.topic.endswith("/shield/events"):
                    if msg.decision != Decision.RELEASED_ALL:
                        data.blocks.append((t, Decision(msg.decision).name.lower(), msg.reason))
                else:
                    for obj in msg.objects:
                        data.objects.setdefault(obj.name, (obj.pose.position.x, obj.pose.position.y))
                    data.collisions = int(msg.collisions)
    audit = run_dir / "audit.jsonl"
    if audit.is_file():
        data.audit = [json.loads(line) for line in audit.read_text(encoding="utf-8").splitlines() if line.strip()]
    if (run_dir / VIOLATIONS_FILE).is_file():
        data.violations = read_violations(run_dir / VIOLATIONS_FILE)
    return data


def _time(entry: dict[str, Any]) -> float:
    import datetime as dt

    return dt.datetime.strptime(entry["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def subtask_spans(audit: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (plan JSON, subtask): when it became active, recovery intervals, how it ended."""
    spans: dict[tuple[int, str], dict[str, Any]] = {}
    plan_index = 0
    for entry in audit:
        if entry["kind"] == "plan":
            plan_index += 1
        if entry["kind"] not in ("subtask", "recovery"):
            continue
        d, t = entry["data"], _time(entry)
        span = spans.setdefault(
            (plan_index, d["subtask"]),
            {
                "plan": plan_index,
                "subtask": d["subtask"],
                "start": None,
                "end": None,
                "state": "",
                "message": "",
                "recovering": [],
            },
        )
        state = d["state"]
        if state == "active" and span["start"] is None:
            span["start"] = t
        if state == "recovering":
            if not span["recovering"] or span["recovering"][-1][1] is not None:
                span["recovering"].append([t, None])
        elif span["recovering"] and span["recovering"][-1][1] is None:
            span["recovering"][-1][1] = t
        if state in ("succeeded", "failed", "skipped", "cancelled"):
            span["end"], span["state"], span["message"] = t, state, d["message"]
            if span["start"] is None:
                span["start"] = t
    return list(spans.values())


def _subtask_figures(span: dict[str, Any], instructions: dict[tuple[int, str], str]) -> dict[str, Any]:
    seconds = round(span["end"] - span["start"], 1) if span["start"] and span["end"] else None
    return {
        "plan": span["plan"],
        "id": span["subtask"],
        "instruction": instructions.get((span["plan"], span["subtask"]), ""),
        "state": span["state"],
        "message": span["message"],
        "seconds": seconds,
        "recoveries": len(span["recovering"]),
    }


def plan_instructions(audit: list[dict[str, Any]]) -> dict[tuple[int, str], str]:
    """(plan number, counted from 1 as in `subtask_spans`, subtask id) -> the subtask's
    instruction (its objective when it has none, as for observe subtasks)."""
    out: dict[tuple[int, str], str] = {}
    plan_index = 0
    for entry in audit:
        if entry["kind"] != "plan":
            continue
        plan_index += 1
        try:
            steps = json.loads(entry["data"].get("plan", "")).get("subtasks", [])
        except (json.JSONDecodeError, AttributeError):
            continue
        for step in steps:
            if isinstance(step, dict) and step.get("id"):
                out[(plan_index, str(step["id"]))] = str(step.get("instruction") or step.get("objective") or "")
    return out


def subtask_objectives(audit: list[dict[str, Any]]) -> dict[str, str]:
    """Subtask id -> its instruction (or objective) in the latest plan that has it."""
    return {subtask: text for (_, subtask), text in sorted(plan_instructions(audit).items())}


def violation_rows(data: RunData) -> list[dict[str, Any]]:
    """Each unpermitted contact: mover, touched, start / end (simulation seconds), subtask
    id and what it was doing, peak normal force (N)."""
    doing = subtask_objectives(data.audit)
    return [
        {
            "mover": v.mover,
            "touched": v.touched,
            "start_s": round(v.start_s, 2),
            "end_s": None if v.end_s is None else round(v.end_s, 2),
            "subtask": v.subtask_id,
            "subtask_does": doing.get(v.subtask_id, ""),
            "force_n": round(v.force_n, 2),
        }
        for v in data.violations
    ]


def violation_lines(figures: dict[str, Any]) -> list[str]:
    """The unpermitted contacts in words, one a line (for report.md and `carryon report`)."""
    lines = []
    for v in figures["unpermitted_contact_list"]:
        during = f"during {v['subtask']}" + (f" ({v['subtask_does']})" if v["subtask_does"] else "")
        if not v["subtask"]:
            during = "with no subtask set"
        until = f"–{v['end_s']}" if v["end_s"] is not None else ""
        lines.append(f"{v['mover']} → {v['touched']} at {v['start_s']}{until} s sim time {during}, {v['force_n']} N")
    count, listed = figures["unpermitted_contacts"], len(figures["unpermitted_contact_list"])
    if count is not None and count > listed:
        lines.append(f"{count - listed} more counted by sim_node but not in {VIOLATIONS_FILE} (still under way?)")
    return lines


def metrics(data: RunData, run_dir: Path) -> dict[str, Any]:
    ends = [e for e in data.audit if e["kind"] == "plan.end"]
    times = [t for t, *_ in data.path] + [_time(e) for e in data.audit]
    spans = subtask_spans(data.audit)
    instructions = plan_instructions(data.audit)
    check = verify(run_dir / "audit.jsonl") if (run_dir / "audit.jsonl").is_file() else None
    return {
        "run": str(run_dir),
        "duration_s": round(max(times) - min(times), 1) if times else 0.0,
        "outcome": ends[-1]["data"]["state"] if ends else "none",
        "outcome_message": ends[-1]["data"]["message"] if ends else "",
        "plans": sum(1 for e in data.audit if e["kind"] == "plan"),
        "validator_rejections": sum(1 for e in data.audit if e["kind"] == "plan.validation"),
        "subtasks": [_subtask_figures(s, instructions) for s in spans],
        "recoveries": sum(len(s["recovering"]) for s in spans),
        "shield_not_released_whole": dict(Counter(kind for _, kind, _ in data.blocks)),
        "memory_changes": sum(1 for e in data.audit if e["kind"] == "memory.change"),
        "unpermitted_contacts": data.collisions,
        "unpermitted_contact_list": violation_rows(data),
        "audit_entries": check.entries if check else 0,
        "audit_ok": bool(check and check.ok),
        "audit_last_hash": check.last_hash if check else "",
    }


def figure(data: RunData, spans: list[dict[str, Any]]) -> Figure:
    """The report's figure: top-down tool path with the shield's decisions and the scene's
    objects (labels placed clear of each other), and the subtask timeline, each subtask named
    by its instruction. The caller saves and closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, timeline) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [1, 1.4]})
    if data.path:
        xy = np.array([(x, y) for _, x, y, _ in data.path])
        top.plot(xy[:, 1], xy[:, 0], color="tab:blue", lw=1.2, label="tool path")
        times = np.array([t for t, *_ in data.path])
        for kind, (marker, color) in _MARKERS.items():
            at = [np.argmin(np.abs(times - t)) for t, k, _ in data.blocks if k == kind]
            if at:
                top.scatter(
                    xy[at, 1], xy[at, 0], marker=marker, color=color, s=22, zorder=3, label=f"shield {kind} ({len(at)})"
                )
        rejected = [np.argmin(np.abs(times - t)) for t, k, _ in data.blocks if k.startswith("rejected")]
        if rejected:
            top.scatter(
                xy[rejected, 1],
                xy[rejected, 0],
                marker="x",
                color="gray",
                s=18,
                zorder=3,
                label=f"shield rejected ({len(rejected)})",
            )
    labels = []
    for name, (x, y) in data.objects.items():
        top.scatter([y], [x], color="black", s=12, zorder=4)
        labels.append(
            top.annotate(
                name, (y, x), fontsize=8, xytext=(0, 0), textcoords="offset points", va="bottom", bbox=_LABEL_BOX
            )
        )
    top.set_xlabel("world y, m")
    top.set_ylabel("world x, m")
    top.invert_xaxis()
    top.set_aspect("equal", adjustable="datalim")
    top.set_title("top-down: tool path and shield decisions")
    top.legend(fontsize=7, loc="best")
    colors = {
        "succeeded": "tab:green",
        "failed": "tab:red",
        "skipped": "lightgray",
        "cancelled": "gray",
        "": "tab:blue",
    }
    t0 = min([s["start"] for s in spans if s["start"]] + [t for t, *_ in data.path[:1]], default=0.0)
    for row, span in enumerate(spans):
        if span["start"] is None:
            continue
        end = span["end"] or max(span["start"], data.path[-1][0] if data.path else span["start"])
        timeline.barh(
            row, max(end - span["start"], 0.3), left=span["start"] - t0, color=colors[span["state"]], alpha=0.8
        )
        for start, stop in span["recovering"]:
            timeline.barh(row, (stop or end) - start, left=start - t0, color="tab:orange", hatch="//", alpha=0.9)
        timeline.text(end - t0 + 0.5, row, span["state"] or "running", va="center", fontsize=8)
    instructions = plan_instructions(data.audit)
    names = [_subtask_name(s, instructions.get((s["plan"], s["subtask"]), "")) for s in spans]
    timeline.set_yticks(range(len(spans)), names, fontsize=8)
    timeline.invert_yaxis()
    timeline.set_xlabel("seconds since the first subtask started")
    timeline.set_title("subtasks (orange hatched: recovery)")
    fig.tight_layout()
    _spread_labels(fig, labels)
    return fig


def _subtask_name(span: dict[str, Any], instruction: str) -> str:
    """`plan 2 · s4` and its instruction on a second line, cut to fit the tick label."""
    text = instruction if len(instruction) <= _NAME_CHARS else instruction[: _NAME_CHARS - 1].rstrip() + "…"
    return f"plan {span['plan']} · {span['subtask']}" + (f"\n{text}" if text else "")


def _spread_labels(fig: Figure, labels: list[Annotation]) -> None:
    """Move each object label off its point so that no two labels overlap (`place_labels`,
    in display pixels; the annotations' offsets are in points)."""
    if not labels:
        return
    fig.canvas.draw()  # lays the figure out: transforms and text sizes are final after this
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    anchors = [tuple(label.axes.transData.transform(label.xy)) for label in labels]
    extents = [label.get_window_extent(renderer) for label in labels]
    offsets = place_labels(anchors, [(e.width, e.height) for e in extents])
    points_per_pixel = 72.0 / fig.dpi
    for label, (dx, dy) in zip(labels, offsets, strict=True):
        label.xyann = (dx * points_per_pixel, dy * points_per_pixel)


def plot(data: RunData, spans: list[dict[str, Any]], path: Path) -> None:
    """`figure(data, spans)` saved to `path` (PNG)."""
    import matplotlib.pyplot as plt

    fig = figure(data, spans)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(run_dir: Path) -> dict[str, Any]:
    """Write metrics.json, report.png and report.md into `run_dir`; returns the metrics."""
    data = read_run(run_dir)
    figures = metrics(data, run_dir)
    (run_dir / "metrics.json").write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    spans = subtask_spans(data.audit)
    plot(data, spans, run_dir / "report.png")
    lines = [
        f"# Run report: {run_dir.name}",
        "",
        f"Outcome: **{figures['outcome']}** — {figures['outcome_message']}",
        "",
        f"* duration {figures['duration_s']} s; {figures['plans']} plan(s), "
        f"{figures['validator_rejections']} validator rejection(s); {figures['recoveries']} recovery run(s); "
        f"{figures['memory_changes']} memory change(s)",
        f"* shield, chunks not released whole: {figures['shield_not_released_whole'] or 'none'}",
        f"* unpermitted contacts (simulator): {figures['unpermitted_contacts']}",
        *(f"  * {line}" for line in violation_lines(figures)),
        f"* audit log: {figures['audit_entries']} entries, chain {'intact' if figures['audit_ok'] else 'BROKEN'}, "
        f"last hash `{figures['audit_last_hash']}`",
        "",
        "| plan | subtask | instruction | state | seconds | recoveries | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in figures["subtasks"]:
        why, does = s["message"].replace("|", "/"), s["instruction"].replace("|", "/")
        lines.append(
            f"| {s['plan']} | {s['id']} | {does} | {s['state']} | {s['seconds']} | {s['recoveries']} | {why} |"
        )
    lines += ["", "![tool path and subtask timeline](report.png)", ""]
    if (run_dir / ANIMATION_FILE).is_file():
        lines += [f"![the run, from its scene camera (carryon report --animation)]({ANIMATION_FILE})", ""]
    (run_dir / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return figures
