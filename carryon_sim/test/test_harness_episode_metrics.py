"""An episode's two safety figures: unpermitted contacts and displaced bystanders (SafeLIBERO's)."""

from __future__ import annotations

from arm_motion import small_world

from carryon_common.core.contact_rules import ContactTask
from carryon_sim.harness.episodes import DISPLACED_M, SETTLED_S, Displacements, bystanders

OBJECTS = [
    {"name": "carrot", "type": "carrot", "pos": (0.55, 0.1)},
    {"name": "plate", "type": "plate", "pos": (0.55, -0.12)},
    {"name": "bottle", "type": "bottle", "pos": (0.4, 0.25)},
    {"name": "bowl", "type": "bowl", "pos": (0.4, -0.3)},
]


def test_bystanders_are_the_objects_no_task_names() -> None:
    world = small_world(OBJECTS)
    tasks = [ContactTask("0", "carrot", "table", "bowl")]
    assert bystanders(world, tasks) == ["plate", "bottle"]
    assert bystanders(world, [*tasks, ContactTask("1", "bottle", "", "", ("plate",))]) == []


def test_an_object_moved_more_than_a_millimetre_is_displaced_once_settled() -> None:
    world = small_world(OBJECTS)
    watch = Displacements(["plate", "bottle"])
    while world.time < SETTLED_S + 0.5:  # objects settle onto the table first (sub-millimetre)
        world.step(0.05)
        watch.observe(world)
    assert watch.start and watch.displaced(world) == {}
    world.displace("plate", 0.5 * DISPLACED_M, 0.0)
    assert watch.displaced(world) == {}
    world.displace("plate", 0.0, 0.002)
    world.displace("bottle", 0.01, 0.0)  # fixed to the table: only a perturbation moves it
    moved = watch.displaced(world)
    assert set(moved) == {"plate", "bottle"} and 0.002 < moved["plate"] < 0.003
