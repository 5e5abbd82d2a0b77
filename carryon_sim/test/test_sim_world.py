"""The MuJoCo world without ROS: scene files, IK, cameras, determinism."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from arm_motion import carrot_world, move, shift

from carryon_common.core.errors import ConfigError
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.ik import ArmIk
from carryon_sim.core.scene import TABLE_TOP_Z, Scene, SceneSpec, load_scene
from carryon_sim.core.world import SCENE_CAMERA, WRIST_CAMERA, World

SCENES = sorted((Path(__file__).resolve().parents[2] / "config" / "scenes").glob("*.yaml"))
DOWN = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])  # tool pointing at the table


def write_scene(tmp_path: Path, data: dict) -> Path:  # type: ignore[type-arg]
    path = tmp_path / "scene.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


BASE = {"name": "t", "description": "test", "locations": {"counter": {"center": [0.5, 0.3], "size": [0.2, 0.2]}}}


@pytest.fixture(scope="module")
def food() -> World:
    return World(load_scene(next(p for p in SCENES if p.stem == "food_serving")), seed=0)


@pytest.fixture(scope="module")
def empty_world() -> World:
    return World(Scene(Path("empty.yaml"), SceneSpec(name="empty", description="no objects", objects=[])))


@pytest.mark.parametrize("path", SCENES, ids=lambda p: p.stem)
def test_every_shipped_scene_builds(path: Path) -> None:
    scene = load_scene(path)
    world = World(scene, seed=1)
    for obj in scene.spec.objects:
        assert world.model.body(obj.name).id > 0


def test_unknown_object_type_names_file_field_and_suggestion(tmp_path: Path) -> None:
    path = write_scene(tmp_path, {**BASE, "objects": [{"name": "c", "type": "carot", "at": "counter"}]})
    with pytest.raises(ConfigError, match=rf"{path}: objects\.0\.type: .*unknown object type 'carot'.*'carrot'"):
        load_scene(path)


def test_missing_field_names_file_and_field(tmp_path: Path) -> None:
    path = write_scene(tmp_path, {**BASE, "objects": [{"type": "carrot", "at": "counter"}]})
    with pytest.raises(ConfigError, match=rf"{path}: objects\.0\.name: Field required"):
        load_scene(path)


def test_overlapping_placements_are_rejected(tmp_path: Path) -> None:
    objects = [{"name": "a", "type": "bowl", "pos": [0.5, 0.0]}, {"name": "b", "type": "cube", "pos": [0.55, 0.0]}]
    path = write_scene(tmp_path, {**BASE, "objects": objects})
    with pytest.raises(ConfigError, match=rf"{path}: objects\.1 \(b\): overlaps objects\.0 \(a\)"):
        load_scene(path)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"name": "c", "type": "carrot", "pos": [0.5, 0.9]}, r"objects\.0 \(c\): placed at .* off the table"),
        ({"name": "c", "type": "carrot", "under": "nothing"}, r"objects\.0\.under: unknown object 'nothing'"),
        ({"name": "c", "type": "carrot", "at": "garage"}, r"objects\.0\.at: unknown location 'garage'"),
        ({"name": "c", "type": "carrot", "at": "counter", "pos": [0.5, 0.0]}, r"exactly one of pos, at, under, in"),
    ],
)
def test_bad_placements_are_reported(tmp_path: Path, obj: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=message):
        load_scene(write_scene(tmp_path, {**BASE, "objects": [obj]}))


def test_hiding_an_item_requires_a_cover(tmp_path: Path) -> None:
    objects = [{"name": "b", "type": "bowl", "pos": [0.5, 0.0]}, {"name": "c", "type": "carrot", "under": "b"}]
    with pytest.raises(ConfigError, match=r"objects\.1\.under: 'b' is a bowl \(container\), not a cover"):
        load_scene(write_scene(tmp_path, {**BASE, "objects": objects}))


@pytest.mark.parametrize("target", [(0.5, 0.0, 0.7), (0.6, 0.25, 0.6), (0.45, -0.25, 0.55), (0.7, -0.1, 0.5)])
def test_ik_reaches_targets_within_5_mm(empty_world: World, target: tuple[float, float, float]) -> None:
    world = empty_world
    world.reset(0)
    ik = ArmIk(world.model, world.robot)
    solution = ik.solve(world.arm_q(), np.array(target), DOWN, max_iterations=50)
    assert solution.position_error_m < 0.005
    world.set_arm_target(solution.q)
    world.step(2.0)  # the joint servos track the solution
    position, rotation = world.ee_pose()
    assert np.linalg.norm(position - target) < 0.005
    assert np.allclose(rotation, DOWN, atol=0.02)


def test_segmentation_labels_match_the_objects_and_the_hidden_carrot_is_hidden(food: World) -> None:
    food.reset(0)
    rig = CameraRig(food.model, food.object_of_body, 320, 240)
    try:
        frame = rig.render(food.data, SCENE_CAMERA)
        camera_from_world = np.linalg.inv(frame.world_from_camera)

        def pixel(point: np.ndarray) -> tuple[int, int, float]:
            p = camera_from_world[:3, :3] @ point + camera_from_world[:3, 3]
            u, v, _ = (frame.K @ p) / p[2]
            return round(v), round(u), float(p[2])

        # A point on each object's visible surface (the plate's centre is under the meat).
        probes = {"pink_cover": (0, 0, 0.06), "bowl": (0, 0, 0.01), "plate": (0, 0.07, 0.01), "bottle": (0, 0, 0.1)}
        for name, offset in probes.items():
            row, col, _ = pixel(food.object_position(name) + np.array(offset))
            label = frame.labels.get(int(frame.segmentation[row, col]))
            assert label == name, f"pixel of {name} is labelled {label}"
        row, col, z = pixel(np.array([0.35, -0.45, TABLE_TOP_Z]))  # bare table: depth = optical-axis distance
        assert frame.labels[int(frame.segmentation[row, col])] == "table"
        assert abs(float(frame.depth[row, col]) - z) < 0.01
        visible = {frame.labels[i] for i in np.unique(frame.segmentation) if i}
        assert "carrot" not in visible and "robot" in visible and "table" in visible
        wrist = rig.render(food.data, WRIST_CAMERA)
        assert wrist.rgb.shape == (240, 320, 3) and wrist.depth.dtype == np.float32
        # Without the truth masks (sim_node when nobody listens to sim/camera/...): same images, no masks.
        bare = rig.render(food.data, SCENE_CAMERA, segmentation=False)
        assert np.array_equal(bare.depth, frame.depth) and np.array_equal(bare.rgb, frame.rgb)
        assert bare.segmentation.shape == frame.segmentation.shape and not bare.segmentation.any()
    finally:
        rig.close()


def scripted_episode(world: World, seed: int) -> np.ndarray:
    world.reset(seed)
    ik = ArmIk(world.model, world.robot)
    trajectory = []
    for k, target in enumerate([(0.55, 0.1, 0.6), (0.5, 0.0, 0.5), (0.55, -0.1, 0.55)]):
        world.set_arm_target(ik.solve(world.arm_q(), np.array(target), DOWN).q)
        world.set_gripper(float(k % 2))
        for _ in range(10):
            world.step(0.05)
            trajectory.append(world.data.qpos.copy())
    return np.array(trajectory)


def test_same_seed_same_episode() -> None:
    scene = load_scene(next(p for p in SCENES if p.stem == "safety"))
    first = scripted_episode(World(scene, seed=4), 4)
    second = scripted_episode(World(scene, seed=4), 4)
    assert np.array_equal(first, second)
    assert scene.placements(4) != scene.placements(5)  # the safety scene is randomised by seed


def test_scene_pictures_are_written(tmp_path: Path) -> None:
    from PIL import Image

    from carryon_sim.render_scenes import main

    scenes_dir = SCENES[0].parent
    assert main(["--scenes-dir", str(scenes_dir), "--out", str(tmp_path), "--width", "160", "--height", "120"]) == 0
    written = sorted(p.stem for p in tmp_path.glob("*.png"))
    assert written == sorted(p.stem for p in SCENES)
    image = np.asarray(Image.open(tmp_path / "food_serving.png"))
    assert image.shape == (120, 160, 3) and image.std() > 10  # a picture, not a blank frame
    assert main(["--scenes-dir", str(scenes_dir), "--out", str(tmp_path), "--scene", "kitchen"]) == 2


# -- grasping, perturbations, contacts ------------------------------------------------
def test_the_gripper_grasps_lifts_carries_and_the_drop_releases_the_carrot() -> None:
    from carryon_sim.core.contacts import grasped_objects

    world = carrot_world()
    ik = ArmIk(world.model, world.robot)
    carrot = world.object_position("carrot")
    move(world, ik, shift(carrot, 0, 0, 0.12), 0.0, 1.0)
    move(world, ik, shift(carrot, 0, 0, 0.012), 0.0, 1.0)
    move(world, ik, shift(carrot, 0, 0, 0.012), 1.0, 0.6)
    assert 0.015 < world.gripper_width() < 0.03  # closed on the 24 mm carrot, not on air
    assert grasped_objects(world.model, world.data, world.object_of_body) == {"carrot"}
    move(world, ik, shift(carrot, 0, 0, 0.15), 1.0, 1.0)
    assert world.object_position("carrot")[2] > carrot[2] + 0.1  # lifted
    move(world, ik, shift(carrot, 0, -0.25, 0.15), 1.0, 1.5)
    carried = world.object_position("carrot")
    assert np.linalg.norm((carried - shift(carrot, 0, -0.25, 0))[:2]) < 0.03  # came along
    world.drop(0.5)  # perturbation: the gripper opens whatever is commanded
    move(world, ik, shift(carrot, 0, -0.25, 0.15), 1.0, 1.0)
    assert world.object_position("carrot")[2] < carried[2] - 0.08  # fell
    assert grasped_objects(world.model, world.data, world.object_of_body) == set()


def test_contact_monitor_flags_a_collision_but_not_permitted_or_resting_contact() -> None:
    from carryon_common.core.contact_rules import ContactTask
    from carryon_sim.core.contacts import ContactMonitor

    world = carrot_world([{"name": "bottle", "type": "bottle", "pos": (0.55, -0.15)}])
    ik = ArmIk(world.model, world.robot)
    monitor = ContactMonitor(known=frozenset({"carrot", "bottle"}))
    monitor.set_task(ContactTask("s", "carrot", "table"), world.time)  # more exemptions: test_sim_contact_monitor
    world.step(0.5)
    assert monitor.update(world.model, world.data, world.object_of_body) == []  # objects resting on the table
    carrot = world.object_position("carrot")
    move(world, ik, shift(carrot, 0, 0, 0.005), 0.0, 1.5, monitor)  # fingers touch the carrot and the table: permitted
    assert monitor.violations == []
    move(world, ik, shift(carrot, 0, 0, 0.12), 0.0, 1.0, monitor)
    bottle = world.object_position("bottle")
    move(world, ik, shift(bottle, 0, 0.0, 0.12), 0.0, 2.0, monitor)  # straight into the bottle's top
    assert [(v.mover, v.touched) for v in monitor.violations] == [("robot", "bottle")]


def test_predicates_and_perturbations_change_what_is_where() -> None:
    from carryon_sim.core import predicates

    world = World(load_scene(next(p for p in SCENES if p.stem == "food_serving")), seed=0)
    world.step(0.3)
    assert predicates.covered_by(world, "carrot") == "pink_cover"
    assert predicates.inside_of(world, "meat") == "plate"
    assert predicates.location_of(world, "carrot") == "kitchen_counter"
    assert predicates.inside_of(world, "carrot") == "" and predicates.covered_by(world, "meat") == ""
    world.uncover("pink_cover")
    world.step(0.3)
    assert predicates.covered_by(world, "carrot") == ""
    world.relocate("carrot", "dining_table")
    world.step(0.3)
    assert predicates.location_of(world, "carrot") == "dining_table"
    assert predicates.inside_of(world, "carrot") == "bowl"  # the dining table's centre holds the bowl
    world.displace("bottle", 0.0, 0.05)  # a fixed obstacle can be moved too
    assert world.object_position("bottle")[1] == pytest.approx(0.07, abs=1e-6)
    with pytest.raises(ValueError, match="unknown location 'garage'"):
        world.relocate("carrot", "garage")


def test_scripted_perturbations_fire_at_their_time(tmp_path: Path) -> None:
    objects = [{"name": "carrot", "type": "carrot", "at": "counter"}]
    schedule = [{"at_s": 0.2, "kind": "displace", "object": "carrot", "by": [0.12, 0.0, 0.0]}]
    world = World(load_scene(write_scene(tmp_path, {**BASE, "objects": objects, "perturbations": schedule})))
    start = world.object_position("carrot")
    world.step(0.1)
    assert world.object_position("carrot")[0] == pytest.approx(start[0], abs=0.005)
    world.step(0.2)
    assert world.object_position("carrot")[0] == pytest.approx(start[0] + 0.12, abs=0.01)
    world.reset(0)  # a reset re-arms the schedule
    world.step(0.3)
    assert world.object_position("carrot")[0] == pytest.approx(start[0] + 0.12, abs=0.01)


@pytest.mark.parametrize(
    ("perturbation", "message"),
    [
        ({"kind": "displace", "object": "carot"}, r"perturbations\.0\.object: unknown object 'carot'"),
        ({"kind": "relocate", "object": "c", "location": "attic"}, r"perturbations\.0\.location: unknown location"),
        ({"kind": "wobble", "object": "c"}, r"perturbations\.0\.kind: .*unknown perturbation 'wobble'"),
        ({"kind": "relocate", "object": "c"}, r"relocate needs a location"),
    ],
)
def test_bad_perturbation_schedules_are_reported(tmp_path: Path, perturbation: dict, message: str) -> None:  # type: ignore[type-arg]
    scene = {**BASE, "objects": [{"name": "c", "type": "carrot", "at": "counter"}], "perturbations": [perturbation]}
    with pytest.raises(ConfigError, match=message):
        load_scene(write_scene(tmp_path, scene))


def test_a_slipping_carrot_is_not_lifted() -> None:
    from carryon_sim.core.scene import PerturbationSpec

    world = carrot_world()
    ik = ArmIk(world.model, world.robot)
    carrot = world.object_position("carrot")
    world.perturb(PerturbationSpec(kind="slip", object="carrot", duration_s=10.0))
    move(world, ik, shift(carrot, 0, 0, 0.12), 0.0, 1.0)
    move(world, ik, shift(carrot, 0, 0, 0.012), 0.0, 1.0)
    move(world, ik, shift(carrot, 0, 0, 0.012), 1.0, 0.6)
    move(world, ik, shift(carrot, 0, 0, 0.15), 1.0, 1.0)
    assert world.object_position("carrot")[2] < carrot[2] + 0.03  # slipped out of the grasp
    world.reset(0)
    assert world.model.geom_friction[:, 0].min() > 0.5  # a reset ends the slip


def test_an_offstage_obstacle_can_be_added_during_an_episode() -> None:
    from carryon_sim.core.scene import PerturbationSpec

    world = World(load_scene(next(p for p in SCENES if p.stem == "safety")), seed=2)
    assert world.object_position("obstacle_3")[0] > 2.0  # waiting off the table, out of view
    world.perturb(PerturbationSpec(kind="place", object="obstacle_3", location="path_middle"))
    x, y, z = world.object_position("obstacle_3")
    assert (x, y) == pytest.approx((0.45, -0.05)) and z == pytest.approx(TABLE_TOP_Z, abs=0.001)


def test_jittered_layouts_never_overlap_and_a_seed_is_one_layout(tmp_path: Path) -> None:
    """Two objects 16 cm apart (12 cm is touching), each jittered by up to 5 cm: many draws would overlap; every
    seed still gets a valid layout (redrawn), the same one each time."""
    objects = [{"name": "bowl", "type": "bowl", "pos": [0.5, 0.0], "jitter_m": 0.05},
               {"name": "bottle", "type": "bottle", "pos": [0.5, 0.16], "jitter_m": 0.05}]  # fmt: skip
    scene = load_scene(write_scene(tmp_path, {**BASE, "objects": objects}))
    layouts = [scene.placements(seed) for seed in range(60)]
    for layout in layouts:
        bowl, bottle = layout["bowl"], layout["bottle"]
        assert np.hypot(bowl.x - bottle.x, bowl.y - bottle.y) >= 0.08 + 0.04  # footprints: bowl 8 cm, bottle 4 cm
    assert scene.placements(7) == layouts[7]
    assert len({(round(p["bowl"].x, 6), round(p["bottle"].y, 6)) for p in layouts}) == 60
