"""The contact monitor applies the one definition of what a subtask may touch
(carryon_common.core.contact_rules): each exemption permits exactly its contacts, in MuJoCo."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arm_motion import carrot_world, move, shift, small_world

from carryon_common.core.contact_rules import ContactTask, Rule
from carryon_sim.core.contacts import ContactMonitor, grasped_objects
from carryon_sim.core.ik import ArmIk
from carryon_sim.core.world import World

Motion = Callable[[World, ArmIk, ContactMonitor], None]


def watch(world: World, task: ContactTask, motion: Motion) -> ContactMonitor:
    """The contact monitor after `motion` ran under `task`."""
    ik = ArmIk(world.model, world.robot)
    monitor = ContactMonitor(known=frozenset(o.name for o in world.scene.spec.objects))
    monitor.set_task(task, world.time)
    world.step(0.3)
    motion(world, ik, monitor)
    monitor.finish(world.time)
    return monitor


def contacts(world: World, task: ContactTask, motion: Motion) -> list[tuple[str, str]]:
    """(mover, touched) of every violation while `motion` runs under `task`."""
    return sorted({(v.mover, v.touched) for v in watch(world, task, motion).violations})


def grasp_and_lift(world: World, ik: ArmIk, monitor: ContactMonitor) -> None:
    """Fingers down around the carrot to 5 mm above its base (they touch what it lies on),
    close, lift 15 cm."""
    carrot = world.object_position("carrot")
    move(world, ik, shift(carrot, 0, 0, 0.12), 0.0, 1.0, monitor)
    move(world, ik, shift(carrot, 0, 0, 0.005), 0.0, 1.5, monitor)
    move(world, ik, shift(carrot, 0, 0, 0.005), 1.0, 0.6, monitor)
    move(world, ik, shift(carrot, 0, 0, 0.15), 1.0, 1.0, monitor)


def from_the_side(name: str, dz: float = 0.01) -> Motion:
    """The open gripper comes down 16 cm beside `name` and slides 10 cm into it."""

    def motion(world: World, ik: ArmIk, monitor: ContactMonitor) -> None:
        at = world.object_position(name)
        move(world, ik, shift(at, 0, 0.16, 0.10), 0.0, 1.0, monitor)
        move(world, ik, shift(at, 0, 0.16, dz), 0.0, 1.0, monitor)
        move(world, ik, shift(at, 0, 0.06, dz), 0.0, 1.5, monitor)
        move(world, ik, shift(at, 0, 0.06, 0.12), 0.0, 1.0, monitor)

    return motion


COUNTER = "kitchen_counter"  # a place: its support is the table


def test_the_target_may_be_touched() -> None:
    assert contacts(carrot_world(), ContactTask("s", "carrot", COUNTER), grasp_and_lift) == []
    assert ("robot", "carrot") in contacts(carrot_world(), ContactTask(), grasp_and_lift)


def test_the_support_only_in_the_patch_at_the_target() -> None:
    """The fingertips touch the table beside the carrot: its support (the place's surface);
    without a source there is none; the table away from the carrot is never permitted."""
    assert ("robot", "table") in contacts(carrot_world(), ContactTask("s", "carrot"), grasp_and_lift)

    def table_away(world: World, ik: ArmIk, monitor: ContactMonitor) -> None:
        carrot = world.object_position("carrot")
        move(world, ik, shift(carrot, 0, -0.2, 0.12), 0.0, 1.0, monitor)
        move(world, ik, shift(carrot, 0, -0.2, -0.003), 0.0, 1.5, monitor)

    assert contacts(carrot_world(), ContactTask("s", "carrot", COUNTER), table_away) == [("robot", "table")]


def test_a_source_object_is_a_support_only_at_the_target() -> None:
    """The plate is the task's source, but the carrot is not on it: touching the plate is a
    violation; as a permitted contact it is not."""
    objects: list[dict[str, Any]] = [
        {"name": "carrot", "type": "carrot", "pos": (0.55, 0.12)},
        {"name": "plate", "type": "plate", "pos": (0.55, -0.12)},
    ]
    assert contacts(small_world(objects), ContactTask("s", "carrot", "plate"), from_the_side("plate")) == [
        ("robot", "plate")
    ]
    permitted = ContactTask("s", "carrot", "plate", "", ("plate",))
    assert contacts(small_world(objects), permitted, from_the_side("plate")) == []


def test_what_the_target_rests_on_is_its_support_while_it_is_grasped_and_lifted() -> None:
    """The carrot lies on a plate that the task does not name (as a dropped carrot on a
    plate's rim): the fingertips pressing the plate while grasping it and as it is lifted
    are permitted; with no source (no pick from anywhere) they are not."""
    objects: list[dict[str, Any]] = [
        {"name": "plate", "type": "plate", "pos": (0.55, 0.1)},
        {"name": "carrot", "type": "carrot", "in": "plate"},
    ]
    monitor = watch(small_world(objects), ContactTask("s", "carrot", COUNTER), grasp_and_lift)
    assert monitor.violations == []
    assert monitor.permitted_steps[("robot", "plate", Rule.SUPPORT)] > 0  # the exemption was used
    assert ("robot", "plate") in contacts(small_world(objects), ContactTask("s", "carrot"), grasp_and_lift)


def carry_into(destination: str) -> Motion:
    def motion(world: World, ik: ArmIk, monitor: ContactMonitor) -> None:
        grasp_and_lift(world, ik, monitor)
        into = world.object_position(destination)
        move(world, ik, shift(into, 0, 0, 0.15), 1.0, 1.5, monitor)
        move(world, ik, shift(into, 0, 0, 0.012), 1.0, 1.5, monitor)  # the fingertips reach its bottom
        move(world, ik, shift(into, 0, 0, 0.012), 0.0, 0.6, monitor)
        move(world, ik, shift(into, 0, 0, 0.15), 0.0, 1.0, monitor)

    return motion


def test_the_destination_may_be_touched() -> None:
    objects: list[dict[str, Any]] = [
        {"name": "carrot", "type": "carrot", "pos": (0.55, 0.1)},
        {"name": "bowl", "type": "bowl", "pos": (0.55, -0.12)},
    ]
    assert contacts(small_world(objects), ContactTask("s", "carrot", COUNTER, "bowl"), carry_into("bowl")) == []
    assert ("robot", "bowl") in contacts(small_world(objects), ContactTask("s", "carrot", COUNTER), carry_into("bowl"))


def test_a_permitted_contact_may_be_touched() -> None:
    bottle: list[dict[str, Any]] = [{"name": "bottle", "type": "bottle", "pos": (0.55, -0.15)}]
    into_bottle = from_the_side("bottle", dz=0.12)
    assert contacts(carrot_world(bottle), ContactTask("s", "carrot", COUNTER, "", ("bottle",)), into_bottle) == []
    assert contacts(carrot_world(bottle), ContactTask("s", "carrot", COUNTER), into_bottle) == [("robot", "bottle")]


def test_a_violation_records_mover_touched_subtask_time_and_force() -> None:
    world = carrot_world([{"name": "bottle", "type": "bottle", "pos": (0.55, -0.15)}])
    ik = ArmIk(world.model, world.robot)
    monitor = ContactMonitor(known=frozenset({"carrot", "bottle"}))
    monitor.set_task(ContactTask("s7", "carrot", COUNTER), world.time)
    world.step(0.3)
    assert monitor.update(world.model, world.data, world.object_of_body) == []  # objects resting on the table
    bottle = world.object_position("bottle")
    move(world, ik, shift(bottle, 0, 0.0, 0.25), 0.0, 1.0, monitor)
    move(world, ik, shift(bottle, 0, 0.0, 0.12), 0.0, 2.0, monitor)  # straight into the bottle's top
    (violation,) = monitor.violations
    assert (violation.mover, violation.touched, violation.subtask_id) == ("robot", "bottle", "s7")
    assert 1.0 < violation.start_s < world.time and violation.force_n > 1.0 and violation.end_s is None
    assert monitor.take_ended() == []
    monitor.set_task(ContactTask("s8", "bottle"), world.time)  # a new subtask ends it; now permitted
    (ended,) = monitor.take_ended()
    assert ended.end_s == world.time and monitor.violations == [ended]
    monitor.update(world.model, world.data, world.object_of_body)
    assert len(monitor.violations) == 1


def test_fingertips_pressing_on_something_do_not_hold_it() -> None:
    """Held (a mover, judged by what it touches) means squeezed between the fingers."""
    world = small_world([{"name": "bowl", "type": "bowl", "pos": (0.55, -0.12)}])
    ik = ArmIk(world.model, world.robot)
    bowl = world.object_position("bowl")
    move(world, ik, shift(bowl, 0, 0, 0.12), 0.0, 1.0)
    move(world, ik, shift(bowl, 0, 0, 0.0), 0.0, 1.5)
    assert grasped_objects(world.model, world.data, world.object_of_body) == set()
    carrot = carrot_world()
    grasp_and_lift(carrot, ArmIk(carrot.model, carrot.robot), ContactMonitor())
    assert grasped_objects(carrot.model, carrot.data, carrot.object_of_body) == {"carrot"}
