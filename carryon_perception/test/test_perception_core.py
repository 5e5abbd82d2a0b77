"""The tabletop backend's parts on synthetic RGB-D: planes, segments, tracks, bad input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
import pytest
from perception_fixtures import TABLE_Z, overhead

from carryon_common.core.clouds import CameraView, ObservationUnusable
from carryon_common.core.locations import Location
from carryon_perception.core.planes import PlaneParams, find_planes
from carryon_perception.core.segment import Segment, mark_partial, segment_image
from carryon_perception.core.tabletop import TabletopPerception
from carryon_perception.core.tracker import Tracker
from carryon_perception.core.types import FIRST_TRACK_ID, ROBOT_ID, TABLE_ID
from carryon_perception.core.views import check_view


class NoRobot:
    def mask(self, points: np.ndarray, joints: Mapping[str, float], gripper_width_m: float | None = None) -> np.ndarray:
        return np.zeros(len(points), dtype=bool)


class RobotAbove:
    """Everything higher than 0.3 m above the table is the robot."""

    def mask(self, points: np.ndarray, joints: Mapping[str, float], gripper_width_m: float | None = None) -> np.ndarray:
        return points[:, 2] > TABLE_Z + 0.3


class ByColour:
    """Names a segment after its mean colour (a stand-in for the catalog)."""

    names: ClassVar[dict[tuple[int, int, int], str]] = {
        (200, 30, 30): "meat",
        (235, 235, 235): "plate",
        (240, 120, 20): "carrot",
        (40, 160, 60): "bottle",
    }

    def label_segments(self, segments: Sequence[Segment], support_height_m: float) -> list[tuple[str | None, float]]:
        out: list[tuple[str | None, float]] = []
        for segment in segments:
            mean = segment.colors.mean(axis=0)
            best = min(self.names, key=lambda c: float(np.linalg.norm(mean - np.array(c))))
            close = float(np.linalg.norm(mean - np.array(best))) < 60
            out.append((self.names[best], 1.0) if close else (None, 0.0))
        return out


def perception(robot: object = None) -> TabletopPerception:
    regions = {
        "left": Location(center=(0.5, 0.2), size=(0.6, 0.4)),
        "right": Location(center=(0.5, -0.2), size=(0.6, 0.4)),
    }
    return TabletopPerception(ByColour(), robot or NoRobot(), regions)  # type: ignore[arg-type]


def test_the_table_plane_is_found_and_a_small_flat_top_is_not_one() -> None:
    rng = np.random.default_rng(0)
    table = np.column_stack([rng.uniform(0, 1, 20_000), rng.uniform(-0.5, 0.5, 20_000), np.full(20_000, TABLE_Z)])
    plate_top = np.column_stack([rng.uniform(0.4, 0.5, 500), rng.uniform(0, 0.1, 500), np.full(500, TABLE_Z + 0.01)])
    wall = np.column_stack([np.full(20_000, 1.0), rng.uniform(-0.5, 0.5, 20_000), rng.uniform(0.4, 1.4, 20_000)])
    planes = find_planes(np.concatenate([table, plate_top, wall]), PlaneParams())
    assert [p.label for p in planes] == ["table"]  # the wall is vertical, the plate too small
    assert planes[0].height_m == pytest.approx(TABLE_Z, abs=2e-3) and planes[0].normal[2] > 0.99
    assert find_planes(plate_top, PlaneParams()) == []


def test_touching_objects_of_different_colours_separate_and_shading_does_not_split() -> None:
    plate = ((30, 60, 30, 60), 0.01, (235, 235, 235))
    meat = ((40, 50, 40, 50), 0.03, (200, 30, 30))  # on the plate
    view = overhead([plate, meat])
    # shade half of the plate: same colour, darker
    assert view.rgb is not None
    view.rgb[30:60, 52:60] = (190, 190, 190)
    result = perception().perceive([view], {}, None, 0.0)
    labels = {o.label: o for o in result.objects}
    assert set(labels) == {"plate", "meat"}, [(o.label, len(o.points)) for o in result.objects]
    assert labels["meat"].support == "plate" and labels["plate"].support == "table"
    image = result.segmentations["top"].instances
    assert (image[40:50, 40:50] == labels["meat"].track_id).all()
    assert (image[31:39, 31:59] == labels["plate"].track_id).all()  # both shades, one plate
    assert (image[:20, :20] == TABLE_ID).all()


def test_every_object_pixel_stays_in_some_segment() -> None:
    """Nothing above the table is dropped: for the shield an unsegmented point is a missed obstacle."""
    speckle = [((r, r + 1, c, c + 1), 0.05, (40, 160, 60)) for r, c in ((10, 10), (10, 80), (80, 10))]
    view = overhead([((30, 60, 30, 60), 0.1, (40, 160, 60)), *speckle])
    result = perception().perceive([view], {}, None, 0.0)
    image = result.segmentations["top"].instances
    assert (image[30:60, 30:60] >= FIRST_TRACK_ID).all()
    for (r0, _, c0, _), _, _ in speckle:
        assert image[r0, c0] >= FIRST_TRACK_ID  # a tiny isolated object stays an object


def test_ids_are_stable_and_unknowns_are_tracked_by_place() -> None:
    tracker = Tracker(match_distance_m=0.05)
    first = tracker.assign(["bowl", None], [np.zeros(3), np.array([0.5, 0.0, 0.0])])
    second = tracker.assign([None, "bowl"], [np.array([0.51, 0.0, 0.0]), np.array([0.1, 0.0, 0.0])])
    assert second[1] == first[0] and second[0] == first[1] and first[1].label.startswith("unknown_")
    third = tracker.assign([None], [np.array([0.9, 0.0, 0.0])])  # far away: a new unknown
    assert third[0].track_id not in {t.track_id for t in first} and third[0].label != first[1].label


def test_the_robot_is_labelled_and_regions_are_reported() -> None:
    arm = ((0, 20, 0, 96), 0.5, (90, 90, 90))  # high above the table: the self-filter's
    bottle = ((40, 50, 20, 30), 0.2, (40, 160, 60))
    result = perception(RobotAbove()).perceive([overhead([arm, bottle])], {}, None, 0.0)
    image, labels = result.segmentations["top"].instances, result.segmentations["top"].labels
    assert (image[0:20] == ROBOT_ID).all() and labels[ROBOT_ID] == "robot"
    bottle_obj = result.object("bottle")
    assert bottle_obj is not None and bottle_obj.region in ("left", "right")


def test_bad_cameras_are_named_and_none_usable_raises() -> None:
    good = overhead([])
    assert check_view(good) is None
    no_k = CameraView("a", 0.0, good.rgb, good.depth, None, {}, None, good.world_from_camera)
    assert "camera_info" in (check_view(no_k) or "")
    assert good.rgb is not None and good.depth is not None
    small = CameraView("b", 0.0, good.rgb[:10], good.depth, None, {}, good.intrinsics, good.world_from_camera)
    assert "sizes differ" in (check_view(small) or "")
    nan = CameraView("c", 0.0, good.rgb, np.full_like(good.depth, np.nan), None, {}, good.intrinsics,
                     good.world_from_camera)  # fmt: skip
    assert "no valid return" in (check_view(nan) or "")
    result = perception().perceive([good, no_k], {}, None, 0.0)
    assert set(result.segmentations) == {"top"} and any("camera a" in d for d in result.diagnostics)
    with pytest.raises(ObservationUnusable, match="camera c"):
        perception().perceive([nan], {}, None, 0.0)


def test_segments_touching_the_border_or_the_robot_are_partial() -> None:
    occluder = np.zeros((8, 8), dtype=bool)
    occluder[:, 5] = True
    depth = np.ones((8, 8))
    at_border = Segment(np.array([0, 1]), np.zeros((2, 3)), np.zeros((2, 3), np.uint8))
    beside_robot = Segment(np.array([3 * 8 + 4]), np.zeros((1, 3)), np.zeros((1, 3), np.uint8))
    inside = Segment(np.array([3 * 8 + 2]), np.zeros((1, 3)), np.zeros((1, 3), np.uint8))
    marked = mark_partial([at_border, beside_robot, inside], depth, occluder)
    assert [s.partial for s in marked] == [True, True, False]


def test_no_candidates_no_segments() -> None:
    empty = np.zeros((4, 4), dtype=bool)
    assert segment_image(np.zeros((4, 4, 3), np.uint8), np.ones((4, 4)), np.zeros((4, 4, 3)), empty) == []


def test_a_region_is_in_view_where_a_camera_sees_its_table_and_not_behind_the_arm() -> None:
    """region_seen: samples of the region that project onto usable pixels (valid depth, not the
    robot); perception reports the named locations with less than half seen as out of view."""
    from carryon_perception.core.views import region_seen

    view = overhead([])
    assert view.depth is not None
    usable = np.ones(view.depth.shape, dtype=bool)
    assert region_seen(view, usable, (0.5, 0.0), (0.2, 0.2), TABLE_Z).all()  # under the camera
    assert not region_seen(view, usable, (2.0, 0.0), (0.2, 0.2), TABLE_Z).any()  # beyond its view
    half = region_seen(view, usable, (0.5 + 0.47, 0.0), (0.2, 0.2), TABLE_Z)  # across the image's edge
    assert 0 < half.sum() < 9
    assert not region_seen(view, np.zeros_like(usable), (0.5, 0.0), (0.2, 0.2), TABLE_Z).any()  # the arm in front
