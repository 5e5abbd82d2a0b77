"""`carryon report --animation`: frames with the subtask and the shield's decisions, from a bag."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageSequence

from carryon_bringup.cli.main import _parser
from carryon_bringup.core.animation import (
    BORDER_PX,
    DECISION_COLOURS,
    HEADER_PX,
    IDLE_COLOUR,
    RELEASED_ALL,
    RELEASED_PREFIX,
    RETREAT,
    PlanMark,
    ShieldMark,
    compose_frame,
    encode_gif,
    overlay_at,
    pick_frames,
)

REPO = Path(__file__).resolve().parents[2]
PLAN = [
    PlanMark(0.0, "Serve me food", "planning", "", "", ""),
    PlanMark(2.0, "Serve me food", "executing", "s2", "open the pink cover", "active"),
    PlanMark(6.0, "Serve me food", "executing", "s4", "put the carrot in the bowl", "recovering"),
    PlanMark(9.0, "Serve me food", "succeeded", "", "", ""),
]


def _mark(t: float, decision: str, released: int = 16) -> ShieldMark:
    return ShieldMark(t, decision, released, 16, "bottle" if decision != RELEASED_ALL else "", f"{decision} because")


SHIELD = [_mark(2.5, RELEASED_ALL), _mark(2.9, RETREAT, 3), _mark(3.3, RELEASED_ALL), _mark(7.0, RELEASED_PREFIX, 4)]


def test_the_overlay_names_the_active_subtask_by_its_instruction() -> None:
    assert overlay_at(1.0, 0.0, PLAN, SHIELD).doing == "plan planning"
    during = overlay_at(3.0, 2.0, PLAN, SHIELD)
    assert during.request == "Serve me food" and during.doing == "s2: open the pink cover" and not during.recovering
    later = overlay_at(7.5, 6.5, PLAN, SHIELD)
    assert later.doing == "s4: put the carrot in the bowl" and later.recovering


def test_a_block_between_two_frames_is_shown_though_a_release_came_after_it() -> None:
    assert overlay_at(3.4, 2.4, PLAN, SHIELD).shield == SHIELD[1]  # retreat at 2.9 beats the release at 3.3
    assert overlay_at(4.0, 3.4, PLAN, SHIELD).shield == SHIELD[2]  # nothing new: the last one, held a while
    assert overlay_at(6.0, 5.0, PLAN, SHIELD).shield is None  # older than the hold
    assert "released 4 of 16 steps" in SHIELD[3].words() and "near bottle" in SHIELD[3].words()
    assert "rejected (no perception)" in _mark(1, "rejected_no_perception", 0).words()


def test_the_frame_is_bordered_in_the_colour_of_the_shields_decision() -> None:
    image = np.full((40, 60, 3), 200, dtype=np.uint8)
    for t, since, colour in ((3.4, 2.4, DECISION_COLOURS[RETREAT]), (7.2, 6.2, DECISION_COLOURS[RELEASED_PREFIX])):
        frame = compose_frame(image, overlay_at(t, since, PLAN, SHIELD), (0.0, 10.0), SHIELD, scale=2.0)
        assert frame.width == 120 + 2 * BORDER_PX
        pixels = np.asarray(frame)
        assert tuple(pixels[HEADER_PX + 1, 1]) == colour  # the border
        assert tuple(pixels[HEADER_PX + BORDER_PX + 5, BORDER_PX + 5]) == (200, 200, 200)  # the camera image
    idle = compose_frame(image, overlay_at(0.5, 0.0, PLAN, SHIELD), (0.0, 10.0), SHIELD, scale=1.0)
    assert tuple(np.asarray(idle)[HEADER_PX + 1, 1]) == IDLE_COLOUR


def test_idle_stretches_keep_a_quarter_of_their_frames() -> None:
    busy = [False] * 9 + [True] * 3 + [False] * 3
    assert pick_frames(range(15), busy, idle_every=4) == [0, 4, 8, 9, 10, 11, 12, 14]


def test_the_gif_plays_back_every_frame_as_composed() -> None:
    rng = np.random.default_rng(0)
    colours = np.array([(30, 30, 30), (200, 200, 200), (90, 60, 30), (0, 120, 255), (255, 0, 0)], dtype=np.uint8)
    base = colours[rng.integers(0, 4, (30, 40))]  # a still background of four colours
    frames = []
    for k in range(5):
        pixels = base.copy()
        pixels[5:10, 4 * k : 4 * k + 6] = colours[4]  # a red block moving over it
        frames.append(Image.fromarray(pixels))
    gif = Image.open(io.BytesIO(encode_gif(frames, fps=4.0)))
    decoded = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(gif)]
    assert len(decoded) == 5 and gif.info["loop"] == 0
    for got, want in zip(decoded, frames, strict=True):
        np.testing.assert_array_equal(got, np.asarray(want))  # no pixel left over from an earlier frame


def test_the_report_command_takes_the_animation_flag() -> None:
    assert _parser().parse_args(["report", "--animation", "runs/x"]).animation is True
    assert _parser().parse_args(["report", "runs/x"]).animation is False


def _write_bag(path: Path) -> None:
    """A recorder_node-like bag: the scene camera at 1 Hz, plan states and shield events."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    from carryon_bringup.core.recorder import typestore_for

    store = typestore_for([REPO / "carryon_interfaces"])
    t = store.types

    def header(s: float) -> Any:
        ns = round(s * 1e9)
        return t["std_msgs/msg/Header"](
            stamp=t["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9), frame_id="world"
        )

    auth = t["carryon_interfaces/msg/OperatorAuth"](principal="test", stamp=header(0).stamp, signature="")
    subtask = t["carryon_interfaces/msg/Subtask"](
        id="s2",
        kind="vla",
        objective="cover off",
        instruction="open the pink cover",
        target="",
        source="",
        destination="",
        depends_on=[],
        condition="",
    )
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        connections: dict[str, Any] = {}

        def write(topic: str, type_name: str, s: float, msg: Any) -> None:
            if topic not in connections:
                msgdef, _ = store.generate_msgdef(type_name, ros_version=2)
                connections[topic] = writer.add_connection(
                    topic, type_name, msgdef=msgdef, rihs01=store.hash_rihs01(type_name)
                )
            writer.write(connections[topic], round(s * 1e9) + 1000, store.serialize_cdr(msg, type_name))

        for k in range(6):
            image = np.full((32, 32, 3), 40 * k, dtype=np.uint8)
            write(
                "/carryon/camera/scene/color",
                "sensor_msgs/msg/Image",
                k + 0.05,
                t["sensor_msgs/msg/Image"](
                    header=header(k + 0.05),
                    height=32,
                    width=32,
                    encoding="rgb8",
                    is_bigendian=0,
                    step=96,
                    data=image.reshape(-1),
                ),
            )
        state = t["carryon_interfaces/msg/SubtaskState"](
            subtask=subtask, state=1, attempts=1, message="", started=header(1).stamp, finished=header(0).stamp
        )
        write(
            "/carryon/planner/plan_state",
            "carryon_interfaces/msg/PlanState",
            1.0,
            t["carryon_interfaces/msg/PlanState"](
                header=header(1.0),
                plan_id="p1",
                request_id="p1",
                user_id="alice",
                request="Serve me food",
                reply="",
                state=2,
                message="executing",
                subtasks=[state],
                active_subtask_id="s2",
                plan_json="",
                auth=auth,
            ),
        )
        for s, decision, released in ((2.0, 0, 16), (3.5, 2, 3)):
            write(
                "/carryon/shield/events",
                "carryon_interfaces/msg/ShieldEvent",
                s,
                t["carryon_interfaces/msg/ShieldEvent"](
                    header=header(s),
                    chunk_id=1,
                    subtask_id="s2",
                    decision=decision,
                    released_steps=released,
                    total_steps=16,
                    min_distance_m=0.01,
                    threshold_m=0.02,
                    first_blocked_step=0,
                    blocking_obstacle="plate" if decision else "",
                    blocking_point=t["geometry_msgs/msg/Point"](x=0.0, y=0.0, z=0.0),
                    holding=False,
                    obstacle_points=10,
                    compute_time_s=0.001,
                    reason="test",
                    auth=auth,
                ),
            )


def test_the_animation_is_written_from_a_bag(tmp_path: Path) -> None:
    from carryon_bringup.report_animation import read_recording, write_animation

    _write_bag(tmp_path / "bag")
    rec = read_recording(tmp_path / "bag")
    assert [round(t, 2) for t, _ in rec.images] == [0.05, 1.05, 2.05, 3.05, 4.05, 5.05]
    assert rec.plan[0].instruction == "open the pink cover" and rec.plan[0].subtask_state == "active"
    assert [(s.decision, s.released, s.obstacle) for s in rec.shield] == [
        ("released_all", 16, ""),
        ("retreat", 3, "plate"),
    ]
    made = write_animation(tmp_path, fps=2.0)
    assert made.path == tmp_path / "animation.gif" and made.source == "camera" and made.bytes <= 2_000_000
    gif = Image.open(made.path)
    assert gif.n_frames == made.frames == 6  # busy from 1 s on, and the first and last are always kept
    gif.seek(4)  # 4.05 s: the retreat at 3.5 s
    assert tuple(np.asarray(gif.convert("RGB"))[HEADER_PX + 1, 1]) == pytest.approx(DECISION_COLOURS[RETREAT], abs=24)
