"""The judge's and the planner's simulation config files agree with the simulator's scene
(they are written out so that no runtime package reads a simulator file)."""

from __future__ import annotations

from pathlib import Path

from carryon_judge.core.geometry import load_shapes
from carryon_planner.core.locations import load_locations
from carryon_sim.core.scene import load_scene, scenes_dir
from carryon_sim.harness.oracle import scene_shapes

CONFIG = Path(__file__).resolve().parents[2] / "config"


def test_the_judges_sim_objects_are_the_default_scenes_catalogue_geometry() -> None:
    written = load_shapes(CONFIG / "judge" / "sim_objects.yaml")
    assert written.shapes == scene_shapes(load_scene(scenes_dir() / "food_serving.yaml")).shapes


def test_the_planners_locations_are_the_default_scenes_locations() -> None:
    written = load_locations(CONFIG / "planner" / "locations.yaml")
    scene = load_scene(scenes_dir() / "food_serving.yaml")
    assert {name: (loc.center, loc.size, loc.description) for name, loc in written.items()} == {
        name: (tuple(loc.center), tuple(loc.size), loc.description) for name, loc in scene.spec.locations.items()
    }


def test_the_robot_profiles_locations_file_reads() -> None:
    assert load_locations(CONFIG / "planner" / "robot_locations.yaml")
