from __future__ import annotations

import numpy as np

from carryon_common.core.depth import backproject, points_by_label


def test_a_flat_wall_back_projects_to_its_plane_in_the_world() -> None:
    k = np.array([[100.0, 0.0, 32.0], [0.0, 100.0, 24.0], [0.0, 0.0, 1.0]])
    depth = np.full((48, 64), 2.0)
    depth[0, 0] = 0.0  # no return
    depth[1, 1] = np.nan
    pose = np.eye(4)
    pose[:3, 3] = [1.0, 2.0, 3.0]
    points, flat = backproject(depth, k, pose)
    assert len(points) == 48 * 64 - 2 and np.allclose(points[:, 2], 5.0)
    centre = points[flat == 24 * 64 + 32][0]
    assert np.allclose(centre, [1.0, 2.0, 5.0])
    right = points[flat == 24 * 64 + 42][0]  # 10 px right of centre: +0.2 m along optical x
    assert np.allclose(right, [1.2, 2.0, 5.0])


def test_labels_follow_their_points_with_a_stride() -> None:
    k = np.array([[50.0, 0.0, 8.0], [0.0, 50.0, 8.0], [0.0, 0.0, 1.0]])
    depth = np.ones((16, 16))
    segmentation = np.zeros((16, 16), dtype=np.int32)
    segmentation[:, 8:] = 7
    points, labels = points_by_label(depth, segmentation, k, np.eye(4), stride=4)
    assert len(points) == 16 and set(labels.tolist()) == {0, 7}
    assert np.all(points[labels == 7][:, 0] >= 0.0) and np.all(points[labels == 0][:, 0] < 0.0)
