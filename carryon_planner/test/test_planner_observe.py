"""Observe from perception (core/observe.py): what a look at a named location shows, from the
objects perception reports and the planner's own regions."""

from __future__ import annotations

from pathlib import Path

from carryon_common.core.locations import Location, load_locations, locations_path
from carryon_planner.core.observe import Seen, agree, describe_look, visible_items

CONFIG = Path(__file__).resolve().parents[2] / "config"
REGIONS = {
    "kitchen_counter": Location(center=(0.55, 0.3), size=(0.3, 0.25)),
    "dining_table": Location(center=(0.55, -0.3), size=(0.3, 0.25)),
}


def test_in_region_near_it_resting_on_another_object_and_held() -> None:
    objects = [
        Seen("meat", 0.5, 0.3, support="plate"),
        Seen("plate", 0.5, 0.3, support="table"),
        Seen("bottle", 0.75, 0.3, support="table"),  # in no region, 5 cm beyond the counter's edge: seen
        Seen("cup", 0.9, 0.3, support="table"),  # 20 cm beyond: not seen from there
        Seen("bowl", 0.55, -0.3, support="table"),  # another location's
        Seen("carrot", 0.55, 0.3, support="", held=True),  # in the gripper: at no location
        Seen("unknown_2", 0.6, 0.35, support="support_1"),  # on a shelf plane: not "in" it
        Seen("unknown_5", 0.45, 0.26, support="table", size_m=0.018),  # a fragment: left out
        Seen("unknown_6", 0.45, 0.26, support="table", size_m=0.04),  # 4 cm across: reported
    ]
    shown = visible_items(objects, "kitchen_counter", REGIONS, planes=("table", "support_1"))
    assert shown == ("bottle", "meat in plate", "plate", "unknown_2", "unknown_6")
    assert visible_items(objects, "dining_table", REGIONS) == ("bowl",)
    assert visible_items(objects, "pantry", REGIONS) == ()  # not a named location


def test_the_operator_line_calls_unknown_objects_unidentified() -> None:
    line = describe_look("kitchen_counter", ("bottle", "meat in plate", "unknown_2"))
    assert line == "kitchen_counter shows bottle, meat in plate, 1 unidentified object(s) (unknown_2)"
    assert describe_look("dining_table", ()) == "dining_table shows nothing"


def test_a_look_keeps_what_most_consecutive_scenes_show() -> None:
    steady = ("meat in plate", "pink_cover", "plate")
    # A phantom in one scene, an object missed in another: neither decides the look.
    looks = [(*steady, "bowl"), ("meat in plate", "plate"), steady]
    assert agree(looks) == steady
    # Seen in two of three scenes: it is there.
    assert agree([(*steady, "carrot"), steady, (*steady, "carrot")]) == ("carrot", *steady)
    # Unidentified objects are counted by kind, whatever number the tracker gave them, and
    # named as the latest scene names them; two of them in two scenes are two.
    looks = [("unknown_3", "unknown_4 in plate"), ("unknown_7", "unknown_8 in plate"), ("unknown_9",)]
    assert agree(looks) == ("unknown_8 in plate", "unknown_9")
    assert agree([("unknown_1", "unknown_2"), ("unknown_5", "unknown_6"), ()]) == ("unknown_5", "unknown_6")
    assert agree([("meat",)]) == ("meat",) and agree([]) == ()
    # Two looks: at least half, so what either shows.
    assert agree([("meat",), ("plate",)]) == ("meat", "plate")
    # The same object twice in one look stays twice.
    assert agree([("cup", "cup"), ("cup", "cup"), ("cup",)]) == ("cup", "cup")


def test_the_default_locations_file_is_found_under_the_config_folder(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CARRYON_CONFIG_DIR", str(CONFIG))
    assert set(load_locations(locations_path(""))) == {"kitchen_counter", "dining_table"}
    assert load_locations(locations_path("planner/robot_locations.yaml"))
