"""Object geometry for the simulation stand-in, read from the simulator's scene files."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

from carryon_policy.core.policy import MissingObservation
from carryon_policy.core.scripted import GRASPS, ObjectGeometry
from carryon_sim.core.scene import Scene, load_scene, scene_path


def object_geometry(scene: Scene, name: str) -> ObjectGeometry:
    """Footprint, height and grasp height of one object of `scene` (scaled)."""
    spec = scene.object(name)
    grasp = GRASPS.get(spec.type)
    return ObjectGeometry(
        name=name,
        type=spec.type,
        radius_m=spec.kind.footprint_m * spec.scale,
        height_m=spec.kind.height_m * spec.scale,
        grasp_height_m=None if grasp is None else grasp[0] * spec.scale,
        yaw_symmetry=0.0 if grasp is None else grasp[1],
    )


def scene_geometry(scenes_dir: Path) -> Callable[[str, str], ObjectGeometry]:
    """`geometry(scene_name, object_name)` backed by the scene files in `scenes_dir`."""

    @cache
    def scene(name: str) -> Scene:
        return load_scene(scene_path(scenes_dir, name))

    def geometry(scene_name: str, name: str) -> ObjectGeometry:
        if not scene_name:
            raise MissingObservation("no simulator scene name yet (sim/truth not received)")
        try:
            return object_geometry(scene(scene_name), name)
        except KeyError as exc:  # UnknownNameError lists the scene's objects
            raise MissingObservation(str(exc)) from None

    return geometry
