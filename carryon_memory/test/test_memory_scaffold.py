from __future__ import annotations

from pathlib import Path

import pytest

from carryon_memory import convert
from carryon_memory.core.types import Fact, Location
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
