"""`carryon bench perception`: the metrics on a hand-made damaged prediction (computed by
hand below), the simulator's truth as the prediction (perfect scores, obstacle recall 1.0),
what obstacle recall counts (`table` kept, `robot` and id 0 missed, the target and what the
gripper holds not counted), the frame generator's situations and targets, and a short run
of the benchmark writing its files. A stand-in
returning the truth replaces the real backend, so none of this depends on it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pytest

from carryon_bench.benchmarks import BENCHMARKS
from carryon_bench.core.bench import BenchOptions
from carryon_bench.perception import evaluate, measure
from carryon_bench.perception_metrics import (
    CameraScore,
    PointCounts,
    ScoreParams,
    Tally,
    Taxonomy,
    distance_to_path,
    load_taxonomy,
    score_camera,
)
from carryon_common.core.clouds import CameraView
from carryon_perception.core.types import CameraSegmentation, PerceptionResult
from carryon_sim.core.world import ARM_JOINTS, URDF_FINGER_JOINTS
from carryon_sim.harness.perception_frames import FramePlan, PerceptionFrame, perception_frames

CONFIG = Path(__file__).resolve().parents[2] / "config"
# Static set-ups only (no episodes): one seed, both scenes, one arm pose in front of an object.
STATIC = FramePlan((0,), episode_stride=0, occluding_poses=1)


class TruthStandIn:
    """Perception that answers with the simulator's truth segmentation of the frame
    `current` holds (set by `shown`) and checks it was not handed that truth."""

    def __init__(self, current: list[PerceptionFrame]) -> None:
        self.current = current

    def perceive(
        self, views: Sequence[CameraView], joints: Mapping[str, float], gripper_width_m: float | None, stamp_s: float
    ) -> PerceptionResult:
        frame = self.current[-1]
        assert set(joints) == {*ARM_JOINTS, *URDF_FINGER_JOINTS} and gripper_width_m == frame.gripper_width_m
        segmentations = {}
        for view in views:
            truth = frame.cameras[view.camera]
            assert view.segmentation is None and not view.labels and view.depth is truth.depth
            segmentations[view.camera] = CameraSegmentation(
                view.camera, stamp_s, truth.segmentation.copy(), dict(truth.labels)
            )
        return PerceptionResult(stamp_s, segmentations, [], [], timings_ms={"total": 1.0})


def shown(frames: Iterator[PerceptionFrame], current: list[PerceptionFrame]) -> Iterator[PerceptionFrame]:
    for frame in frames:
        current.append(frame)
        yield frame


@pytest.fixture(scope="module")
def static_frames() -> list[PerceptionFrame]:
    return list(perception_frames(STATIC, scenes=CONFIG / "scenes"))


# --- metrics on a hand-made 10 x 12 image -------------------------------------------
# Depth 1 m everywhere, f = 50 px, principal point (0, 0), camera = world: pixel (r, c) is
# the point (0.02 c, 0.02 r, 1.0). The gripper path runs along row 7 (y = 0.14 m), so
# rows 2..9 lie within 10 cm of it (|r - 7| * 2 cm <= 10 cm) and rows 0, 1 do not.
TRUTH_LABELS = {1: "robot", 2: "table", 3: "carrot", 4: "bowl", 5: "obstacle_1", 6: "obstacle_3", 7: "pea", 8: "meat"}
TAXONOMY = Taxonomy(
    types={"carrot": "carrot", "bowl": "bowl", "plate": "plate", "obstacle_1": "block", "obstacle_3": "block",
           "pea": "pea", "meat": "meat"},
    sizes={"carrot": 0.1, "bowl": 0.16, "plate": 0.19, "obstacle_1": 0.12, "obstacle_3": 0.12, "pea": 0.01,
           "meat": 0.05},
)  # fmt: skip
PARAMS = ScoreParams(min_pixels=5, min_size_m=0.03, path_radius_m=0.10)


def truth_image() -> np.ndarray:
    t = np.full((10, 12), 2, dtype=np.int32)  # table
    t[1:5, 1:5] = 3  # carrot 4x4 = 16 px (rows 1-4)
    t[1:6, 6:11] = 4  # bowl 5x5 = 25 px (rows 1-5)
    t[6:9, 1:4] = 5  # obstacle_1 3x3 = 9 px
    t[6:9, 6:9] = 6  # obstacle_3 3x3 = 9 px
    t[0, 0:6] = 7  # pea: 6 px, 1 cm (too small for IoU), row 0 (off the path)
    t[0, 10:12] = 8  # meat: 2 px (< min_pixels: not scored)
    t[9, :] = 1  # robot
    return t


def geometry() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    intrinsics = np.array([[50.0, 0.0, 0.0], [0.0, 50.0, 0.0], [0.0, 0.0, 1.0]])
    path = np.array([[0.0, 0.14, 1.0], [0.22, 0.14, 1.0]])
    return np.ones((10, 12), dtype=np.float32), intrinsics, np.eye(4), path


def score(predicted: np.ndarray, labels: dict[int, str], exempt: tuple[str, ...] = ()) -> CameraScore:
    return score_camera(
        truth_image(),
        TRUTH_LABELS,
        predicted,
        labels,
        geometry=geometry(),
        taxonomy=TAXONOMY,
        params=PARAMS,
        exempt=exempt,
    )


def points(s: CameraScore) -> dict[str, int]:
    return {n: c.points for n, c in s.obstacles.items()}


def kept(s: CameraScore) -> dict[str, int]:
    return {n: c.kept for n, c in s.obstacles.items()}


def test_truth_as_prediction_scores_perfectly_by_hand() -> None:
    s = score(truth_image(), dict(TRUTH_LABELS))
    assert s.iou == {"carrot": 1.0, "bowl": 1.0, "obstacle_1": 1.0, "obstacle_3": 1.0}  # pea too small, meat unseen
    assert all(s.correct.values()) and set(s.correct) == {"carrot", "bowl", "obstacle_1", "obstacle_3", "pea"}
    # within 10 cm: carrot rows 2-4 (12), bowl rows 2-5 (20), both blocks (9 + 9); all kept
    assert points(s) == kept(s) == {"carrot": 12, "bowl": 20, "obstacle_1": 9, "obstacle_3": 9}
    assert all(c.as_objects == c.points and c.missed_robot == c.missed_none == 0 for c in s.obstacles.values())
    assert s.robot_iou == 1.0
    tally = Tally(TAXONOMY)
    tally.add(s, ("camera:scene",))
    summary = tally.summary()
    assert summary["obstacle_recall"] == summary["obstacle_points_labelled_as_objects"] == 100.0
    assert summary["obstacle_points"] == 50


def test_damaged_prediction_scores_what_was_computed_by_hand() -> None:
    p = truth_image()
    labels = {1: "robot", 2: "table", 7: "pea", 10: "carrot", 11: "plate", 12: "obstacle_3", 13: "block"}
    p[1:5, 1:5] = 0
    p[2:4, 2:4] = 10  # carrot eroded to 2x2, the rest left as background
    p[1:6, 6:11] = 11  # the bowl's exact mask, labelled plate (a wrong label)
    p[6:8, 1:4] = 12  # obstacle_1 labelled obstacle_3 (same type: right); its bottom row ...
    p[8, 1:4] = 2  # ... labelled table (kept: the shield avoids table points, not an object though)
    p[6:9, 6:9] = 13  # obstacle_3 labelled by its type name
    p[5, 6:11] = 1  # the bowl's bottom row taken for the robot (5 points missed)
    p[0, 10:12] = 0
    s = score(p, labels)
    assert s.iou["carrot"] == pytest.approx(4 / 16)
    assert s.iou["bowl"] == 0.0  # no instance of type bowl
    assert s.iou["obstacle_1"] == pytest.approx(6 / 9) and s.iou["obstacle_3"] == 1.0
    assert np.mean(list(s.iou.values())) == pytest.approx((0.25 + 0.0 + 6 / 9 + 1.0) / 4)  # 0.479
    assert s.correct == {"carrot": True, "bowl": False, "obstacle_1": True, "obstacle_3": True, "pea": True}  # 80 %
    assert s.labelled["bowl"] == "plate"
    # carrot: 12 near the path, 4 kept (8 eroded to id 0); bowl: 15 of 20 kept (a wrong label
    # is still an obstacle; its 5 robot points are not); obstacle_1: 9 of 9 (3 of them called
    # table: kept, but not as objects); obstacle_3 9 of 9. Recall 37 / 50 = 74 %, labelled as
    # objects 34 / 50 = 68 %; misses: 5 labelled robot (bowl), 8 id 0 (carrot).
    assert points(s) == {"carrot": 12, "bowl": 20, "obstacle_1": 9, "obstacle_3": 9}
    assert s.obstacles == {
        "carrot": PointCounts(points=12, kept=4, as_objects=4, missed_robot=0, missed_none=8),
        "bowl": PointCounts(points=20, kept=15, as_objects=15, missed_robot=5, missed_none=0),
        "obstacle_1": PointCounts(points=9, kept=9, as_objects=6, missed_robot=0, missed_none=0),
        "obstacle_3": PointCounts(points=9, kept=9, as_objects=9, missed_robot=0, missed_none=0),
    }
    tally = Tally(TAXONOMY)
    tally.add(s, ("camera:scene",))
    summary = tally.summary()
    assert summary["iou_mean"] == pytest.approx(0.4791667) and summary["label_accuracy"] == 80.0
    assert summary["obstacle_recall"] == 74.0 and summary["obstacle_points"] == 50
    assert summary["obstacle_points_labelled_as_objects"] == 68.0
    assert summary["obstacle_missed_robot"] == 5 and summary["obstacle_missed_none"] == 8
    table = tally.by_type()
    assert table["bowl"]["labelled_as"] == {"plate": 1}
    assert table["bowl"]["obstacle_missed_robot"] == 5 and table["carrot"]["obstacle_missed_none"] == 8
    assert table["block"]["obstacle_recall"] == 100.0 and table["block"][
        "obstacle_points_labelled_as_objects"
    ] == pytest.approx(100 * 15 / 18)
    # the same prediction with the carrot the target and obstacle_1 held: 15 + 9 of 29 kept
    target_and_held = score(p, labels, exempt=("carrot", "obstacle_1"))
    assert points(target_and_held) == {"bowl": 20, "obstacle_3": 9} and kept(target_and_held) == {
        "bowl": 15,
        "obstacle_3": 9,
    }


def test_table_is_kept_robot_and_no_id_missed_target_and_held_not_counted() -> None:
    """The shield keeps points labelled table (and any other non-robot label) as obstacles,
    drops robot points and has no point of id 0; it exempts the target, and what the
    gripper holds moves with the hand: neither is counted."""
    p = truth_image()
    p[8, 6:9] = 0  # obstacle_3's bottom row: no instance
    labels = {**TRUTH_LABELS, 4: "robot", 6: "table"}  # the bowl taken for the robot, obstacle_3 for the table
    s = score(p, labels, exempt=("carrot", "obstacle_1"))  # the carrot the target, obstacle_1 held
    assert s.obstacles == {
        "bowl": PointCounts(points=20, kept=0, as_objects=0, missed_robot=20, missed_none=0),
        "obstacle_3": PointCounts(points=9, kept=6, as_objects=0, missed_robot=0, missed_none=3),
    }
    assert "carrot" in s.iou and "obstacle_1" in s.correct  # still scored for masks and labels


def test_identical_types_match_either_one_to_one() -> None:
    """Blocks labelled by each other's names still match; one instance over both blocks
    matches one of them only."""
    p = truth_image()
    swapped = {**TRUTH_LABELS, 5: "obstacle_3", 6: "obstacle_1"}
    assert score(p, swapped).iou["obstacle_1"] == 1.0 and score(p, swapped).iou["obstacle_3"] == 1.0
    p[6:9, 1:9] = 5  # one instance spanning both blocks (24 px)
    s = score(p, dict(TRUTH_LABELS))
    assert sorted([s.iou["obstacle_1"], s.iou["obstacle_3"]]) == [0.0, pytest.approx(9 / 24)]


def test_robot_and_unknown_labels_are_misses_or_obstacles() -> None:
    p = truth_image()
    labels = {**TRUTH_LABELS, 3: "robot", 6: "unknown_1"}  # the carrot taken for the robot, a block unknown
    s = score(p, labels)
    assert kept(s)["carrot"] == 0 and kept(s)["obstacle_3"] == 9  # unknown_<n> is still an obstacle
    assert s.obstacles["carrot"].missed_robot == 12 and s.obstacles["obstacle_3"].as_objects == 9
    assert not s.correct["carrot"] and not s.correct["obstacle_3"]
    assert s.robot_iou == pytest.approx(12 / (12 + 16))


def test_an_object_without_a_listed_size_is_sized_by_its_points() -> None:
    """The pea without an entry in the sizes: its pixels span 0-10 cm (row 0, columns 0-5),
    so its mask is scored."""
    taxonomy = Taxonomy(TAXONOMY.types, {k: v for k, v in TAXONOMY.sizes.items() if k != "pea"})
    image = truth_image()
    s = score_camera(image, TRUTH_LABELS, image, TRUTH_LABELS, geometry=geometry(), taxonomy=taxonomy, params=PARAMS)
    assert s.iou["pea"] == 1.0


def test_distance_to_a_polyline_and_to_a_point() -> None:
    points = np.array([[0.0, 1.0, 0.0], [2.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    path = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    assert distance_to_path(points, path) == pytest.approx([1.0, 1.0, 1.0])
    assert distance_to_path(points, path[:1]) == pytest.approx([1.0, 2.0, 1.0])


def test_the_taxonomy_comes_from_the_scene_files() -> None:
    taxonomy = load_taxonomy(CONFIG)
    assert taxonomy.kind("obstacle_3") == taxonomy.kind("obstacle_1") == "block"
    assert taxonomy.same("obstacle_1", "obstacle_3") and taxonomy.same("bottle", "obstacle_2")
    assert not taxonomy.same("plate", "bowl") and not taxonomy.same("unknown_1", "carrot")
    assert taxonomy.sizes["carrot"] == pytest.approx(0.1) and taxonomy.sizes["bottle"] == pytest.approx(0.2)


# --- frames from the simulator ----------------------------------------------------------
def test_the_static_frames_cover_their_situations(static_frames: list[PerceptionFrame]) -> None:
    tags = {(f.scene, f.tag): f for f in static_frames}
    food = {("food_serving", t) for t in ("home", "uncovered", "touching", "arm_occluding", "carried")}
    safety = {("safety", t) for t in ("home", "touching", "arm_occluding", "carried", "placed_obstacle")}
    assert set(tags) == food | safety
    assert "covered" in tags["food_serving", "home"].situations
    assert "uncovered" in tags["food_serving", "uncovered"].situations
    assert tags["food_serving", "carried"].held == ("meat",) and tags["safety", "carried"].held == ("cube",)
    assert "touching" in tags["safety", "touching"].situations  # the cube in the bowl
    assert any("arm_occluding" in f.situations for f in static_frames if f.tag == "arm_occluding")
    targets = {(scene, tag): f.target for (scene, tag), f in tags.items()}
    assert targets == {
        **{
            ("food_serving", t): o for t, o in (("home", "pink_cover"), ("uncovered", "carrot"), ("touching", "carrot"))
        },
        **{("safety", t): "cube" for t in ("home", "touching", "placed_obstacle")},
        ("food_serving", "arm_occluding"): "",  # the hidden object stays an obstacle
        ("safety", "arm_occluding"): "",
        ("food_serving", "carried"): "meat",  # the carried object is the subtask's
        ("safety", "carried"): "cube",
    }
    for frame in static_frames:
        assert set(frame.cameras) == {"scene", "wrist"} and set(frame.joints) == {*ARM_JOINTS, *URDF_FINGER_JOINTS}
        assert frame.cameras["scene"].rgb.shape == (256, 256, 3) and frame.gripper_path.shape[1] == 3


def test_episode_frames_carry_the_cube_along_the_commanded_path() -> None:
    plan = FramePlan((0,), episode_stride=3, occluding_poses=0, scenes=("safety",))
    frames = [f for f in perception_frames(plan, size=(64, 64), scenes=CONFIG / "scenes") if f.tag == "episode"]
    assert len(frames) >= 5 and len({f.sequence for f in frames}) == 1
    assert any(f.held == ("cube",) and "carried" in f.situations for f in frames)
    assert all(len(f.gripper_path) > 1 for f in frames)  # the tool now + the chunk's steps
    assert {f.target for f in frames} == {"cube"}  # the one subtask's object
    assert [f.stamp_s for f in frames] == sorted(f.stamp_s for f in frames)


def test_truth_as_prediction_on_rendered_frames_is_perfect(static_frames: list[PerceptionFrame]) -> None:
    current: list[PerceptionFrame] = []
    run = measure(
        shown(iter(static_frames), current), lambda _scene: TruthStandIn(current), load_taxonomy(CONFIG), ScoreParams()
    )
    summary = run.tally.summary()
    assert summary["iou_mean"] == 1.0 and summary["label_accuracy"] == 100.0 and summary["obstacle_recall"] == 100.0
    assert summary["iou_scored"] > 20 and summary["obstacle_points"] > 100
    assert run.frames == len(static_frames) and len(run.build_ms) == len(static_frames)  # one sequence each
    assert run.tally.by_type()["block"]["iou_mean"] == 1.0
    assert summary["obstacle_points_labelled_as_objects"] == 100.0
    assert summary["obstacle_missed_robot"] == summary["obstacle_missed_none"] == 0
    for camera in ("scene", "wrist"):
        assert run.tally.summary(f"camera:{camera}")["obstacle_recall"] == 100.0


def test_the_target_and_the_held_object_are_no_obstacles_in_rendered_frames(
    static_frames: list[PerceptionFrame],
) -> None:
    """Carried: the held object (also the target) has points near the path, but is not
    counted; the other objects still are."""
    frame = next(f for f in static_frames if f.scene == "safety" and f.tag == "carried")
    cam = frame.cameras["scene"]

    def obstacles(exempt: tuple[str, ...]) -> set[str]:
        geometry = (cam.depth, cam.K, cam.world_from_camera, frame.gripper_path)
        s = score_camera(
            cam.segmentation,
            cam.labels,
            cam.segmentation,
            cam.labels,
            geometry=geometry,
            taxonomy=load_taxonomy(CONFIG),
            params=ScoreParams(),
            exempt=exempt,
        )
        return set(s.obstacles)

    assert "cube" in obstacles(()) and "bowl" in obstacles(())
    assert obstacles((frame.target, *frame.held)) == obstacles(()) - {"cube"}


def test_a_short_run_writes_its_figures_and_chart(tmp_path: Path) -> None:
    """What `carryon bench perception --quick` does, with the truth stand-in, two small
    camera sizes and the safety scene's set-ups; results.json / .md written as the CLI does."""
    assert "perception" in BENCHMARKS.names()
    current: list[PerceptionFrame] = []
    plan = FramePlan((0,), episode_stride=0, occluding_poses=1, scenes=("safety",))
    options = BenchOptions(quick=True, seed=0, run_dir=tmp_path / "run")
    result = evaluate(
        options,
        lambda _scene: TruthStandIn(current),
        lambda size: shown(perception_frames(plan, size=size, scenes=CONFIG / "scenes"), current),
        load_taxonomy(CONFIG),
        sizes=((96, 96), (128, 96)),
    )
    figures = {m.name: m.value for m in result.metrics}
    assert figures["frames"] == 5
    assert figures["iou_mean"] == 1.0 and figures["label_accuracy"] == 100.0 and figures["obstacle_recall"] == 100.0
    assert figures["obstacle_recall_128x96"] == 100.0 and figures["iou_block"] == 1.0
    assert figures["obstacle_recall_scene"] == figures["obstacle_recall_wrist_128x96"] == 100.0
    assert figures["obstacle_points_labelled_as_objects"] == 100.0
    assert figures["obstacle_missed_robot"] == figures["obstacle_missed_none"] == 0
    assert figures["obstacle_recall_block"] == 100.0
    assert {"perceive_p50_96x96", "perceive_p99_128x96", "pipeline_total_p99_96x96"} <= set(figures)
    assert figures["pipeline_total_p50_96x96"] == 1.0
    result.write(options.run_dir / "results.json")
    (options.run_dir / "results.md").write_text(result.to_markdown(), encoding="utf-8")
    saved = json.loads((options.run_dir / "results.json").read_text())
    assert saved["details"]["96x96"]["by_group"]["tag:placed_obstacle"]["frames"] == 1
    misses = saved["details"]["96x96"]["obstacle_misses"]["scene"]["block"]
    assert misses["points"] == misses["kept"] > 0 and misses["missed_robot"] == misses["missed_none"] == 0
    assert "| obstacle_recall | 100 | % |" in (options.run_dir / "results.md").read_text()
    assert (options.run_dir / "perception.png").stat().st_size > 0
