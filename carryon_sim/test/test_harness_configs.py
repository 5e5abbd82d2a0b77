"""The judge's and the planner's simulation config files agree with the simulator's scenes
(they are written out so that no runtime package reads a simulator file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_common.core.locations import load_locations
from carryon_judge.core.geometry import load_shapes
from carryon_sim.core.scene import load_scene, scenes_dir
from carryon_sim.harness.oracle import scene_shapes

CONFIG = Path(__file__).resolve().parents[2] / "config"
SCENES = sorted(p.stem for p in scenes_dir().glob("*.yaml"))


def _locations_file(scene: str) -> Path:
    """food_serving, the default scene, has the default file; the others one each."""
    name = "locations.yaml" if scene == "food_serving" else f"locations_{scene}.yaml"
    return CONFIG / "planner" / name


@pytest.mark.parametrize("scene", SCENES)
def test_the_judges_sim_objects_hold_every_scenes_catalogue_geometry(scene: str) -> None:
    written = load_shapes(CONFIG / "judge" / "sim_objects.yaml").shapes
    for name, shape in scene_shapes(load_scene(scenes_dir() / f"{scene}.yaml")).shapes.items():
        assert name in written, f"{scene}: {name} is missing from judge/sim_objects.yaml"
        got = written[name]
        assert got.role == shape.role, name
        assert (got.radius_m, got.height_m) == pytest.approx((shape.radius_m, shape.height_m), abs=1e-9), name


@pytest.mark.parametrize("scene", SCENES)
def test_the_planners_locations_file_of_each_scene_is_the_scenes_locations(scene: str) -> None:
    written = load_locations(_locations_file(scene))
    spec = load_scene(scenes_dir() / f"{scene}.yaml").spec
    assert {name: (loc.center, loc.size, loc.description) for name, loc in written.items()} == {
        name: (tuple(loc.center), tuple(loc.size), loc.description) for name, loc in spec.locations.items()
    }


def test_the_robot_profiles_locations_file_reads() -> None:
    assert load_locations(CONFIG / "planner" / "robot_locations.yaml")
