"""The one definition of what a subtask may touch (contact_rules), rule by rule."""

from __future__ import annotations

from pathlib import Path

from carryon_common.core import contact_rules as rules
from carryon_common.core.contact_rules import ContactTask, Rule, Violation, read_violations

CARROT = ContactTask("s4", "carrot", "kitchen_counter", "bowl")
OBJECTS = {"carrot", "bowl", "plate", "bottle", "pink_cover"}


def judge(task: ContactTask, touched: str, *, resting: tuple[str, ...] = (), in_patch: bool) -> Rule | None:
    support = rules.supports(task, known=OBJECTS, resting_on=lambda: resting)
    return rules.rule_for(task, touched, support=support, in_patch=in_patch)


def test_target_destination_and_permitted_contacts_anywhere() -> None:
    task = ContactTask("s", "carrot", "table", "bowl", ("bottle",))
    assert rules.touchable(task) == {"carrot", "bowl", "bottle"}
    assert judge(task, "carrot", in_patch=False) == Rule.TARGET
    assert judge(task, "bowl", in_patch=False) == Rule.DESTINATION
    assert judge(task, "bottle", in_patch=False) == Rule.PERMITTED
    assert judge(ContactTask(), "", in_patch=True) is None  # no task: nothing


def test_the_support_only_in_the_patch_at_the_target() -> None:
    assert judge(CARROT, "table", in_patch=True) == Rule.SUPPORT  # a place's support surfaces
    assert judge(CARROT, "table", in_patch=False) is None  # the table away from the target
    on_plate = ContactTask("s", "meat", "plate", "bowl")
    assert rules.supports(on_plate, known=OBJECTS | {"meat"}) == ("plate",)  # an object source
    assert judge(ContactTask("s", "carrot", "", "bowl"), "table", in_patch=True) is None  # no source, no support
    assert rules.in_support_patch(0.0, 0.05) and rules.in_support_patch(-0.03, 0.08)
    assert not rules.in_support_patch(0.025, 0.0)  # above the band: the target was lifted off
    assert not rules.in_support_patch(-0.035, 0.0) and not rules.in_support_patch(0.0, 0.09)


def test_what_the_target_rests_on_is_its_support_also_while_it_is_lifted_off_it() -> None:
    assert judge(CARROT, "plate", resting=("plate",), in_patch=True) == Rule.SUPPORT  # a dropped carrot on a rim
    tracker = rules.SupportTracker()
    resting: tuple[str, ...] = ("plate",)
    asked: list[bool] = []

    def measured() -> tuple[str, ...]:
        asked.append(True)
        return resting

    assert tracker(CARROT, known=OBJECTS, held=False, resting_on=measured) == ("table", "plate")
    resting = ()  # held: the carrot is no longer on the plate, nor measured
    assert tracker(CARROT, known=OBJECTS, held=True, resting_on=measured) == ("table", "plate")
    assert len(asked) == 1
    assert tracker(CARROT, known=OBJECTS, held=False, resting_on=measured) == ("table",)  # set down elsewhere
    fresh = rules.SupportTracker()
    fresh(CARROT, known=OBJECTS, held=False, resting_on=lambda: ("plate",))
    other = ContactTask("s5", "carrot", "kitchen_counter", "bowl")
    assert fresh(other, known=OBJECTS, held=True, resting_on=measured) == ("table",)  # a new task forgets


def test_resting_on_is_what_holds_the_target_from_below() -> None:
    assert rules.resting_on({"plate": 0.002}) == ("plate",)
    assert rules.resting_on({"bottle": 0.02}) == ()  # a side contact: the carrot leans on it
    assert rules.resting_on({"table": 0.0, "block": 0.0}) == ()  # standing on the table: nothing beside it


def test_violations_round_trip_through_the_run_file(tmp_path: Path) -> None:
    later = Violation(12.5, "carrot", "plate", "s4", 3.25, 12.9)
    first = Violation(3.0, "robot", "bottle", "s2", 40.0)
    path = tmp_path / rules.VIOLATIONS_FILE
    path.write_text(later.to_json() + "\n" + first.to_json() + "\n" + '{"start_s": 1')  # a torn last line
    assert read_violations(path) == [first, later]
    assert first.describe() == "robot → bottle at 3.00 s (on) during s2, 40.0 N"
    assert later.describe() == "carrot → plate at 12.50-12.90 s during s4, 3.2 N"
