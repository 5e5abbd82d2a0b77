"""The compiled distance kernel against a brute-force numpy reference on random scenes."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from carryon_robot.core.hand import box_distance
from carryon_shield.core.filter import NEAR_RANGE_M, Thresholds, check_poses
from carryon_shield.core.geometry import GripperGeometry, Part
from carryon_shield.core.types import ObstacleSet


def reference(points, geometry, thresholds, positions, rotations):  # type: ignore[no-untyped-def]
    """Every point against every part at every pose, no cropping."""
    per_part = thresholds.of_part()
    clearance, margin, part = [], [], []
    for position, rotation in zip(positions, rotations, strict=True):
        local = (points - position) @ rotation
        distances, parts = [], []
        for index, (lo, hi) in enumerate(geometry.boxes):
            distances.append(box_distance(local, lo, hi))
            parts.append(geometry.box_part[index])
        for x, y, z, r in geometry.spheres[geometry.box < 0]:
            distances.append(np.maximum(np.linalg.norm(local - [x, y, z], axis=1) - r, 0.0))
            parts.append(Part.CARRIED)
        d = np.asarray(distances)
        g = d - per_part[np.asarray(parts)][:, None]
        clearance.append(min(float(d.min()), NEAR_RANGE_M))
        worst = np.unravel_index(np.argmin(g), g.shape)
        margin.append(min(float(g[worst]), NEAR_RANGE_M - per_part.max()))
        part.append(parts[worst[0]] if g[worst] < NEAR_RANGE_M - per_part.max() else -1)
    return np.asarray(clearance), np.asarray(margin), part


@pytest.mark.parametrize("seed", range(6))
def test_kernel_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    points = rng.uniform(-0.15, 0.15, (int(rng.integers(1, 3000)), 3))
    obstacles = ObstacleSet(points, np.zeros(len(points), dtype=np.int32), ("thing",), 0.0, "world")
    carried = np.array([[0.0, 0.0, 0.03, 0.02], [0.01, 0.0, 0.06, 0.015]]) if seed % 2 else None
    geometry = GripperGeometry.build(float(rng.uniform(0.0, 0.08)), carried)
    positions = rng.uniform(-0.1, 0.1, (12, 3))
    rotations = Rotation.random(12, random_state=seed).as_matrix()
    thresholds = Thresholds(0.02, 0.008, 0.015)
    check = check_poses(obstacles, geometry, thresholds, positions, rotations)
    clearance, margin, part = reference(points, geometry, thresholds, positions, rotations)
    assert check.checked == 12
    np.testing.assert_allclose(check.clearance, clearance, atol=1e-12)
    np.testing.assert_allclose(check.margin, margin, atol=1e-12)
    for index, expected in enumerate(part):
        if expected >= 0:
            assert check.part[index] == expected and check.nearest[index] >= 0
    # Stopping at the first violation measures the same prefix and leaves the rest NaN.
    early = check_poses(obstacles, geometry, thresholds, positions, rotations, stop_at_first=True)
    violated = np.flatnonzero(margin < 0.0)
    stop = int(violated[0]) + 1 if len(violated) else 12
    assert early.checked == stop
    np.testing.assert_allclose(early.margin[:stop], margin[:stop], atol=1e-12)
    assert np.all(np.isnan(early.margin[stop:])) and np.all(early.violated[stop:])


def test_empty_obstacles_and_no_poses() -> None:
    empty = ObstacleSet(np.zeros((0, 3)), np.zeros(0, dtype=np.int32), (), 0.0, "world")
    check = check_poses(
        empty, GripperGeometry.build(0.08), Thresholds(), np.zeros((2, 3)), np.tile(np.eye(3), (2, 1, 1))
    )
    assert not check.violated.any() and np.all(check.clearance == NEAR_RANGE_M) and np.all(check.nearest == -1)
    none = check_poses(empty, GripperGeometry.build(0.08), Thresholds(), np.zeros((0, 3)), np.zeros((0, 3, 3)))
    assert none.checked == 0 and len(none.margin) == 0


def test_non_finite_points_are_left_out_and_indices_still_name_the_original_points() -> None:
    points = np.array([[np.nan, 0.0, 0.0], [0.0, 0.052, -0.018], [np.inf, 1.0, 1.0]])
    obstacles = ObstacleSet(points, np.zeros(3, dtype=np.int32), ("thing",), 0.0, "world")
    down = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
    check = check_poses(obstacles, GripperGeometry.build(0.08), Thresholds(), np.zeros((1, 3)), down[None])
    assert check.violated[0] and check.nearest[0] == 1
