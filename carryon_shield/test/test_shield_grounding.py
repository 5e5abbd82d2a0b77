"""Grounding: depth + masks -> obstacles with the robot removed and the task exempt."""

from __future__ import annotations

import numpy as np
import pytest

from carryon_shield.core.grounding import (
    GroundingParams,
    MaskGrounder,
    TextPromptedGrounder,
    region_from_point,
    voxel_downsample,
)
from carryon_shield.core.types import PerceptionUnavailable, RgbdFrame, TaskSpec

LABELS = {1: "table", 2: "carrot", 3: "bowl", 4: "bottle", 5: "robot"}
H, W = 60, 80


def overhead_frame(camera: str = "top", stamp: float = 1.0) -> RgbdFrame:
    """A camera 1 m above the table (z = 0.42) looking straight down; 1 px = 1 cm at the
    table. Carrot (3x3 cm, 3 cm tall) at the image centre, bowl to its left, bottle
    to its right, a robot finger just below the carrot in the image."""
    intrinsics = np.array([[100.0, 0.0, W / 2], [0.0, 100.0, H / 2], [0.0, 0.0, 1.0]])
    pose = np.eye(4)
    pose[:3, :3] = np.diag([1.0, -1.0, -1.0])  # optical z down, x along world x
    pose[:3, 3] = [0.5, 0.0, 1.42]
    depth = np.full((H, W), 1.0, dtype=np.float32)
    seg = np.ones((H, W), dtype=np.int32)
    r, c = H // 2, W // 2
    depth[r - 1 : r + 2, c - 1 : c + 2] = 0.97
    seg[r - 1 : r + 2, c - 1 : c + 2] = 2
    seg[r - 5 : r + 5, 5:15] = 3
    depth[r - 5 : r + 5, 5:15] = 0.95
    seg[r - 3 : r + 3, 60:66] = 4
    depth[r - 3 : r + 3, 60:66] = 0.8
    seg[r + 3 : r + 6, c : c + 2] = 5
    depth[r + 3 : r + 6, c : c + 2] = 0.9
    return RgbdFrame(camera, depth, intrinsics, pose, stamp, segmentation=seg, labels=LABELS, mask_stamp_s=stamp)


def grounder(margin: float = 0.05) -> MaskGrounder:
    return MaskGrounder(GroundingParams(voxel_m=0.01, stride=1, source_patch_margin_m=margin))


def names_of(obstacles) -> set[str]:  # type: ignore[no-untyped-def]
    return {obstacles.name_of(i) for i in range(len(obstacles))}


def test_backprojected_points_land_in_the_world_frame() -> None:
    obstacles = grounder().ground([overhead_frame()], TaskSpec())
    bottle = obstacles.points[[obstacles.name_of(i) == "bottle" for i in range(len(obstacles))]]
    assert np.allclose(bottle[:, 2], 1.42 - 0.8, atol=1e-6)  # 0.62: the bottle top
    table = obstacles.points[[obstacles.name_of(i) == "table" for i in range(len(obstacles))]]
    assert np.allclose(table[:, 2], 0.42, atol=1e-6)
    assert table[:, 0].min() < 0.15 and table[:, 0].max() > 0.85


def test_robot_target_destination_and_source_patch_are_not_obstacles() -> None:
    obstacles = grounder().ground([overhead_frame()], TaskSpec("s", "carrot", "table", "bowl"))
    assert names_of(obstacles) == {"table", "bottle"}
    assert obstacles.robot_points == 6 and len(obstacles.target_points) > 0
    # The table is exempt only in a patch beneath the carrot (5 cm margin).
    table = obstacles.points[[obstacles.name_of(i) == "table" for i in range(len(obstacles))]]
    distance = np.linalg.norm(table[:, :2] - [0.5, 0.0], axis=1)
    assert distance.min() > 0.05 and distance.min() < 0.08


def test_a_source_named_by_location_takes_its_patch_from_the_support_labels() -> None:
    """The planner names sources by location ("kitchen_counter"); no mask has that label,
    so the patch comes from the support labels (the table), as if the source were "table"."""
    by_object = grounder().ground([overhead_frame()], TaskSpec("s", "carrot", "table", "bowl"))
    by_location = grounder().ground([overhead_frame()], TaskSpec("s", "carrot", "kitchen_counter", "bowl"))
    assert len(by_location) == len(by_object) and by_location.exempt_points == by_object.exempt_points
    nothing = grounder().ground([overhead_frame()], TaskSpec("s", "carrot", "", "bowl"))
    assert by_location.exempt_points > nothing.exempt_points


def carrot_on_plate_frame(carrot_depth_m: float = 0.97) -> RgbdFrame:
    """A dropped carrot lying on a plate's rim, a tall bottle flush against it."""
    frame = overhead_frame()
    depth, seg = frame.depth.copy(), frame.segmentation.copy()
    r, c = H // 2, W // 2
    seg[r - 8 : r + 8, c - 25 : c + 4] = 6  # the plate, 1 cm under the carrot's top surface
    depth[r - 8 : r + 8, c - 25 : c + 4] = 0.98
    seg[r - 1 : r + 2, c - 1 : c + 2], depth[r - 1 : r + 2, c - 1 : c + 2] = 2, carrot_depth_m  # the carrot
    seg[r - 1 : r + 2, c + 2 : c + 5], depth[r - 1 : r + 2, c + 2 : c + 5] = 4, 0.8  # the bottle against it
    labels = {**LABELS, 6: "plate"}
    return RgbdFrame("top", depth, frame.K, frame.world_from_camera, 1.0, segmentation=seg, labels=labels)


def nearest(obstacles, name: str, xy: tuple[float, float] = (0.5, 0.0)) -> float:  # type: ignore[no-untyped-def]
    """Horizontal distance from `xy` to the nearest obstacle point of `name` (inf: none)."""
    points = obstacles.points[[obstacles.name_of(i) == name for i in range(len(obstacles))]]
    return float(np.linalg.norm(points[:, :2] - xy, axis=1).min()) if len(points) else float("inf")


def test_what_the_target_rests_on_now_is_exempt_beneath_it_but_not_what_it_lies_against() -> None:
    """A dropped carrot lying on a plate's rim (not its source): the plate just under it is
    exempt like the source patch, the rest of the plate is not; a tall bottle flush against
    the carrot stays an obstacle everywhere."""
    frame = carrot_on_plate_frame()
    obstacles = grounder().ground([frame], TaskSpec("s", "carrot", "kitchen_counter", "bowl"))

    def points(name: str) -> np.ndarray:
        return obstacles.points[[obstacles.name_of(i) == name for i in range(len(obstacles))]]

    plate = np.linalg.norm(points("plate")[:, :2] - [0.5, 0.0], axis=1)
    assert len(plate) and plate.min() > 0.05  # exempt within the 5 cm patch margin, an obstacle beyond
    bottle = np.linalg.norm(points("bottle")[:, :2] - [0.5, 0.0], axis=1)
    assert bottle.min() < 0.03  # right against the carrot, still an obstacle
    held = grounder().ground([frame], TaskSpec("s", "carrot", "kitchen_counter", "bowl"), holding=True)
    assert min(np.linalg.norm(p[:2] - [0.5, 0.0]) for i, p in enumerate(held.points)
               if held.name_of(i) == "plate") < 0.03  # fmt: skip  # carried over it: the plate is an obstacle
    without_source = grounder().ground([frame], TaskSpec("s", "carrot", "", "bowl"))
    assert min(np.linalg.norm(p[:2] - [0.5, 0.0]) for i, p in enumerate(without_source.points)
               if without_source.name_of(i) == "plate") < 0.03  # fmt: skip  # no pick from anywhere: no patch


def test_what_the_target_rested_on_stays_its_support_while_it_is_grasped_and_lifted() -> None:
    """contact_rules.SupportTracker: once the gripper holds the carrot, the plate it lay on
    is still exempt beneath it (it is being lifted off it) — but only for this grounder's
    current task, and only until the carrot is lifted clear (the patch band)."""
    task = TaskSpec("s", "carrot", "kitchen_counter", "bowl")
    one = grounder()
    one.ground([carrot_on_plate_frame()], task)
    assert nearest(one.ground([carrot_on_plate_frame()], task, holding=True), "plate") > 0.05
    assert nearest(grounder().ground([carrot_on_plate_frame()], task, holding=True), "plate") < 0.03  # never saw it
    lifted = one.ground([carrot_on_plate_frame(0.935)], task, holding=True)  # 3.5 cm higher
    assert nearest(lifted, "plate") < 0.03
    other = TaskSpec("t", "carrot", "kitchen_counter", "bowl")
    assert nearest(one.ground([carrot_on_plate_frame()], other, holding=True), "plate") < 0.03  # a new task forgets


def test_a_lifted_target_leaves_no_support_patch() -> None:
    """The table under the carrot is exempt while the carrot stands on it, not once it is
    held 4 cm above it: the band follows the target's lowest point."""
    task = TaskSpec("s", "carrot", "table", "bowl")
    frame = overhead_frame()
    assert nearest(grounder().ground([frame], task), "table") > 0.03
    depth = frame.depth.copy()
    depth[H // 2 - 1 : H // 2 + 2, W // 2 - 1 : W // 2 + 2] = 0.93
    lifted = RgbdFrame("top", depth, frame.K, frame.world_from_camera, 1.0, segmentation=frame.segmentation,
                       labels=LABELS)  # fmt: skip
    assert nearest(grounder().ground([lifted], task, holding=True), "table") < 0.03


def test_the_exemptions_are_the_shared_contact_rules() -> None:
    """What is exempt as a whole is contact_rules.touchable; the patch's margin and support
    surfaces are the rules' defaults (the contact monitor uses them)."""
    from carryon_common.core import contact_rules as rules
    from carryon_shield.core.config import ShieldConfig

    for task in (
        TaskSpec("s", "carrot", "table", "bowl"),
        TaskSpec("s", "bowl", "kitchen_counter"),
        TaskSpec("s", "carrot", "", "", ("bottle", "bowl")),
    ):
        assert task.exempt_names() == set(rules.touchable(task))
        obstacles = grounder().ground([overhead_frame()], task)
        assert not names_of(obstacles) & task.exempt_names()
    assert ShieldConfig().source_patch_margin_m == rules.SUPPORT_MARGIN_M == GroundingParams().source_patch_margin_m
    assert tuple(ShieldConfig().support_labels) == rules.SUPPORT_SURFACES == GroundingParams().support_labels


def test_a_target_standing_on_the_table_exempts_no_low_object_beside_it() -> None:
    """A carrot on the table (its sides seen down to 5 mm above it) next to a 1 cm block:
    the block is right under the carrot's lowest points' height, but the carrot rests on
    the table, so the block stays an obstacle."""
    frame = overhead_frame()
    depth, seg = frame.depth.copy(), frame.segmentation.copy()
    r, c = H // 2, W // 2
    for col in (c - 2, c + 2):  # the carrot's sides, 5 mm above the table
        seg[r - 1 : r + 2, col], depth[r - 1 : r + 2, col] = 2, 0.995
    seg[r - 2 : r + 3, c + 3 : c + 7], depth[r - 2 : r + 3, c + 3 : c + 7] = 6, 0.99  # the block, 1 cm tall
    labels = {**LABELS, 6: "block"}
    frame = RgbdFrame("top", depth, frame.K, frame.world_from_camera, 1.0, segmentation=seg, labels=labels)

    def block_points(task: TaskSpec) -> int:
        obstacles = grounder().ground([frame], task)
        return sum(obstacles.name_of(i) == "block" for i in range(len(obstacles)))

    assert block_points(TaskSpec("s", "carrot", "kitchen_counter", "bowl")) == block_points(TaskSpec()) > 0


def test_without_a_task_everything_but_the_robot_is_an_obstacle() -> None:
    obstacles = grounder().ground([overhead_frame()], TaskSpec())
    assert names_of(obstacles) == {"table", "carrot", "bowl", "bottle"}


def test_permitted_contacts_are_exempt() -> None:
    task = TaskSpec("s", "carrot", "table", "bowl", permitted=("bottle",))
    assert "bottle" not in names_of(grounder().ground([overhead_frame()], task))


def test_cameras_are_fused_and_the_oldest_stamp_is_kept() -> None:
    one = grounder().ground([overhead_frame()], TaskSpec())
    both = grounder().ground([overhead_frame("a", 1.0), overhead_frame("b", 0.7)], TaskSpec())
    assert len(both) == len(one)  # same view twice: voxel downsampling merges it
    assert both.stamp_s == 0.7


def test_voxel_downsampling_keeps_one_point_per_voxel() -> None:
    points = np.array([[0.001, 0.001, 0.001], [0.002, 0.003, 0.004], [0.015, 0.0, 0.0]])
    kept, labels = voxel_downsample(points, np.array([1, 2, 3], dtype=np.int32), 0.01)
    assert len(kept) == 2 and set(labels.tolist()) <= {1, 2, 3}


def test_frames_without_masks_fail_closed() -> None:
    frame = overhead_frame()
    unmasked = RgbdFrame(frame.camera, frame.depth, frame.K, frame.world_from_camera, 1.0)
    with pytest.raises(PerceptionUnavailable, match="no segmentation"):
        grounder().ground([unmasked], TaskSpec())
    with pytest.raises(PerceptionUnavailable):
        grounder().ground([], TaskSpec())


class FakeSegmenter:
    """Finds 'bowl' and the robot by their simulator ids; never finds the carrot."""

    def __init__(self, seg: np.ndarray) -> None:
        self.seg = seg
        self.prompts: list[str] = []

    def segment(self, rgb, prompts):  # type: ignore[no-untyped-def]
        self.prompts = list(prompts)
        ids = {"bowl": 3, "robot gripper": 5}
        return {p: self.seg == ids.get(p, -1) for p in prompts}


class FakePointer:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def point(self, rgb, name):  # type: ignore[no-untyped-def]
        self.asked.append(name)
        return (H // 2, W // 2)  # the carrot's centre pixel


def test_text_prompted_grounding_with_point_prompting_fallback() -> None:
    frame = overhead_frame()
    rgb = np.zeros((H, W, 3), dtype=np.uint8)
    text_frame = RgbdFrame("top", frame.depth, frame.K, frame.world_from_camera, 1.0, rgb=rgb, mask_stamp_s=1.0)
    segmenter, pointer = FakeSegmenter(frame.segmentation), FakePointer()  # type: ignore[arg-type]
    grounding = TextPromptedGrounder(GroundingParams(stride=1), segmenter, ["robot gripper"], pointer)
    obstacles = grounding.ground([text_frame], TaskSpec("s", "carrot", "", "bowl"))
    assert segmenter.prompts == ["carrot", "bowl", "robot gripper"]
    assert pointer.asked == ["carrot"] and grounding.point_prompted == ["carrot"]
    assert len(obstacles.target_points) > 0  # the pointed region became the carrot
    assert obstacles.robot_points == 6
    assert names_of(obstacles) == {"unknown"}  # table and bottle were not named: unnamed obstacles


def test_region_from_point_follows_depth_continuity() -> None:
    depth = overhead_frame().depth
    region = region_from_point(depth, (H // 2, W // 2))
    assert region.sum() == 9  # the 3x3 carrot top, cut from the table by the depth step
    assert not region_from_point(depth, (-1, 0)).any()
