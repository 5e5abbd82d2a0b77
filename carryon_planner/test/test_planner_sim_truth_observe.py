"""The simulator-only observe (observe_source: sim_truth): regions from the planner's own
locations file, a fresh sim/truth snapshot, every report labelled SIMULATOR ORACLE."""

from __future__ import annotations

from pathlib import Path

from carryon_common.core.locations import Location, load_locations, locations_path
from carryon_interfaces.msg import ObjectState, SimTruth
from carryon_planner.sim_truth_observe import observe_from_sim_truth, visible_from_truth

CONFIG = Path(__file__).resolve().parents[2] / "config"
COUNTER = Location(center=(0.55, 0.3), size=(0.3, 0.25))


def _object(
    name: str, x: float, y: float, *, location: str = "", inside: str = "", covered_by: str = ""
) -> ObjectState:
    state = ObjectState(name=name, location=location, inside=inside, covered_by=covered_by)
    state.pose.position.x, state.pose.position.y = x, y
    return state


def _truth(stamp_s: float, *objects: ObjectState) -> SimTruth:
    msg = SimTruth(scene="food_serving", objects=list(objects))
    msg.header.stamp.sec, msg.header.stamp.nanosec = int(stamp_s), int((stamp_s % 1) * 1e9)
    return msg


def test_what_a_look_shows_in_near_and_uncovered() -> None:
    objects = [
        _object("meat", 0.5, 0.3, location="kitchen_counter", inside="plate"),
        _object("carrot", 0.5, 0.3, location="kitchen_counter", covered_by="pink_cover"),
        _object("bottle", 0.75, 0.3),  # in no region, 5 cm beyond the counter's edge: seen
        _object("bowl", 0.55, -0.3, location="dining_table"),
    ]
    assert visible_from_truth(objects, "kitchen_counter", COUNTER) == ("bottle", "meat in plate")
    assert visible_from_truth(objects, "kitchen_counter", None) == ("meat in plate",)


def test_a_fresh_snapshot_is_reported_as_the_oracle_and_a_stale_one_times_out() -> None:
    truth = _truth(10.0, _object("bowl", 0.55, -0.3, location="dining_table"))
    report = observe_from_sim_truth(lambda: truth, lambda: 10.5, "dining_table", None, timeout_s=1.0)
    assert report.succeeded and report.message.startswith("SIMULATOR ORACLE")
    assert report.revealed == {"dining_table": ("bowl",)}
    stale = observe_from_sim_truth(lambda: truth, lambda: 12.0, "dining_table", None, timeout_s=0.1)
    assert not stale.succeeded and "no fresh sim/truth" in stale.message


def test_the_default_locations_file_is_found_under_the_config_folder(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CARRYON_CONFIG_DIR", str(CONFIG))
    assert set(load_locations(locations_path(""))) == {"kitchen_counter", "dining_table"}
    assert load_locations(locations_path("planner/robot_locations.yaml"))
