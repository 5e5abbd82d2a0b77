"""The hand's geometry in the tool frame: distances to its boxes and the fingers' boxes at
an opening."""

from __future__ import annotations

import numpy as np

from carryon_robot.core.hand import FINGER_DEPTH_M, OPEN_WIDTH_M, box_distance, finger_boxes


def test_box_distance_is_euclidean_outside_and_zero_inside() -> None:
    assert box_distance(np.array([[0.0, 0.0, 0.0], [0.0, 0.0, -0.05]]), np.array([-0.1, -0.03, -0.12]),
                        np.array([0.1, 0.03, -0.03])).tolist() == [0.03, 0.0]  # fmt: skip


def test_finger_boxes_open_symmetrically_and_clamp_the_width() -> None:
    (_, left_hi), (right_lo, right_hi) = finger_boxes(0.04)
    assert (left_hi[0], right_lo[0]) == (-0.02, 0.02)  # inner faces at half the opening
    assert np.isclose(right_hi[0] - right_lo[0], FINGER_DEPTH_M)
    assert finger_boxes(1.0) == finger_boxes(OPEN_WIDTH_M)
    assert finger_boxes(-1.0) == finger_boxes(0.0)
