"""The perception catalog of the simulated scenes: labels perfect segments correctly from both
cameras, and the stored file is what the script makes (it cannot drift from the scenes)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import mujoco
import pytest

from carryon_perception.core.catalog import Appearance, Catalog
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.scene import load_scene, scene_path, scenes_dir
from carryon_sim.core.world import HOME_Q, SCENE_CAMERA, WRIST_CAMERA, World
from carryon_sim.harness.catalog_views import build_catalog, catalog_differences, frame_segments

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CATALOG = REPO / "config" / "perception" / "catalog_sim.yaml"
# Arm poses (radians): home, turned left / right over the counter and the dining table, leaning low.
POSES = {
    "home": HOME_Q,
    "left": (0.6, 0.2, 0.0, -2.0, 0.0, 2.2, 0.785),
    "right": (-0.6, 0.2, 0.0, -2.0, 0.0, 2.2, 0.785),
    "low": (0.0, 0.35, 0.0, -1.9, 0.0, 2.25, 0.785),
}
# (scene, seeds, states): `uncovered` lifts the cover off the carrot, `obstacle` places the offstage block.
SETUPS = (("food_serving", (0,), ("initial", "uncovered")), ("safety", (0, 1, 2), ("initial", "obstacle")))
MIN_PIXELS = 30


@dataclass(frozen=True)
class Frame:
    scene: str
    camera: str
    candidates: tuple[str, ...]  # the scene's objects
    segments: dict[str, Appearance]  # truth name -> perfect segment


def _frames(world: World, rig: CameraRig, seeds: tuple[int, ...], states: tuple[str, ...]) -> Iterator[Frame]:
    names = tuple(o.name for o in world.scene.spec.objects)
    for seed in seeds:
        for state in states:
            world.reset(seed)
            if state == "uncovered":
                world.uncover("pink_cover")
            elif state == "obstacle":
                world.place("obstacle_3", "path_middle")
            for q in POSES.values():
                world.data.qpos[world.robot.arm_qpos] = q
                mujoco.mj_forward(world.model, world.data)
                for camera in (SCENE_CAMERA, WRIST_CAMERA):
                    yield Frame(
                        world.scene.name, camera, names, frame_segments(rig.render(world.data, camera), MIN_PIXELS)
                    )


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load(CATALOG)


@pytest.fixture(scope="module")
def frames() -> list[Frame]:
    out: list[Frame] = []
    for scene, seeds, states in SETUPS:
        world = World(load_scene(scene_path(scenes_dir(), scene)), seed=seeds[0])
        rig = CameraRig(world.model, world.object_of_body, 256, 256)
        try:
            out += _frames(world, rig, seeds, states)
        finally:
            rig.close()
    return out


def _correct(catalog: Catalog, truth: str, label: str | None) -> bool:
    """The right name, or another object of the same type (identical objects look alike)."""
    return label is not None and catalog.entries[label].type == catalog.entries[truth].type


@pytest.mark.parametrize("camera", [SCENE_CAMERA, WRIST_CAMERA])
@pytest.mark.parametrize("scene", [s[0] for s in SETUPS])
def test_perfect_segments_are_labelled_correctly(
    catalog: Catalog, frames: list[Frame], scene: str, camera: str
) -> None:
    tally: Counter[bool] = Counter()
    wrong = []
    for frame in (f for f in frames if f.scene == scene and f.camera == camera):
        truth = list(frame.segments)
        matches = catalog.label([frame.segments[n] for n in truth], candidates=frame.candidates)
        for name, match in zip(truth, matches, strict=True):
            ok = _correct(catalog, name, match.label)
            tally[ok] += 1
            if not ok:
                wrong.append(f"{name} -> {match.label} ({match.cost:.2f})")
    assert tally[True] + tally[False] >= 20, "too few segments to judge"
    accuracy = tally[True] / (tally[True] + tally[False])
    assert accuracy >= 0.98, f"{accuracy:.1%} of {sum(tally.values())} segments; wrong: {wrong}"


@pytest.mark.parametrize("missing", ["bottle", "block", "meat", "cover", "carrot"])
def test_an_object_missing_from_the_catalog_stays_unknown(catalog: Catalog, frames: list[Frame], missing: str) -> None:
    """What the catalog does not know is left unlabelled (an obstacle named unknown_<n>),
    not forced onto the nearest entry."""
    known = Catalog({n: e for n, e in catalog.entries.items() if e.type != missing})
    seen = forced = 0
    for frame in frames:
        truth = list(frame.segments)
        candidates = [n for n in frame.candidates if n in known.entries]
        matches = known.label([frame.segments[n] for n in truth], candidates=candidates)
        for name, match in zip(truth, matches, strict=True):
            if catalog.entries[name].type == missing:
                seen += 1
                forced += match.label is not None
    assert seen >= 5
    assert forced <= 0.05 * seen


def test_every_scene_object_has_an_entry(catalog: Catalog) -> None:
    for path in sorted(scenes_dir().glob("*.yaml")):
        for obj in load_scene(path).spec.objects:
            assert obj.name in catalog.entries, f"{path.name}: {obj.name} missing from {CATALOG.name}"
            entry = catalog.entries[obj.name]
            assert len(entry.references) >= 8
            assert entry.height_m is not None and entry.footprint_m is not None


def test_stored_catalog_is_what_the_script_makes(catalog: Catalog) -> None:
    made = build_catalog(scenes_dir().glob("*.yaml"))
    problems = catalog_differences(made, catalog)
    assert not problems, (
        "config/perception/catalog_sim.yaml is outdated; rerun scripts/make_perception_catalog.py: "
        + ("; ".join(problems))
    )
