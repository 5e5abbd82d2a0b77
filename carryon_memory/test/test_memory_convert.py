"""memory_node's message conversions and memory directory check."""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_interfaces.msg import SceneUpdate as SceneUpdateMsg
from carryon_memory import convert
from carryon_memory.core.types import Change, Fact, Location, SceneOp, StoredImage
from carryon_memory.node import MemoryDirError, ensure_memory_dir


def test_fact_and_location_round_trip_through_messages() -> None:
    fact = Fact("diet", "preference", "vegetarian", durable=False, source="dialogue:r1")
    assert convert.fact_from_msg(convert.fact_to_msg(fact)) == fact
    location = Location(
        "kitchen_counter", ("carrot under pink_cover", "bowl"), observed_s=1700000000.5, source="initial"
    )
    back = convert.location_from_msg(convert.location_to_msg(location))
    assert back.contents == location.contents
    assert back.observed_s == pytest.approx(location.observed_s)


def test_memory_dir_is_created_and_checked(tmp_path: Path) -> None:
    assert ensure_memory_dir(tmp_path / "mem").is_dir()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(MemoryDirError, match="cannot create"):
        ensure_memory_dir(blocker / "mem")
    with pytest.raises(MemoryDirError, match="not a directory"):
        ensure_memory_dir(blocker)


def test_changes_and_scene_updates_convert() -> None:
    change = Change(7, 6, 2, 1700000000.25, "users/alice.md", "set", "diet", "preference", "vegetarian", "vegan",
                    "dialogue:r2", "a" * 64, "b" * 64)  # fmt: skip
    msg = convert.change_to_msg(change)
    assert (msg.version, msg.file, msg.previous_value, msg.new_value, msg.source) == (
        7, "users/alice.md", "vegetarian", "vegan", "dialogue:r2"
    )  # fmt: skip
    assert (msg.stamp.sec, msg.stamp.nanosec) == (1700000000, 250000000)
    update = SceneUpdateMsg(op=SceneUpdateMsg.OP_MOVE_ITEM, location="dining_table", item="carrot", source="judge")
    update.observed.sec = 12
    core = convert.scene_update_from_msg(update)
    assert (core.op, core.location, core.item, core.observed_s, core.source) == (
        SceneOp.MOVE_ITEM, "dining_table", "carrot", 12.0, "judge"
    )  # fmt: skip
    assert convert.scene_update_from_msg(SceneUpdateMsg(op=9)).op == 9  # left for the store to reject by index


def test_a_stored_image_becomes_a_reference_image_message_with_its_bytes() -> None:
    data = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
    msg = convert.stored_image_to_msg(StoredImage("alice", "mug", "image", "images/alice/mug.png", "png", data))
    assert (msg.user_id, msg.entity, msg.key, msg.path, msg.image.format) == (
        "alice", "mug", "image", "images/alice/mug.png", "png"
    )  # fmt: skip
    assert bytes(msg.image.data) == data
