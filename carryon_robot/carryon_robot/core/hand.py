"""The hand's geometry: the Panda palm, flange and fingers as boxes in the tool frame.

Tool frame: origin at the tool centre point between the fingertips, z = approach
direction, x = finger axis (the fingers open along it). Metres. The shield models the
hand with these boxes; recovery uses the same boxes to pick grasps the shield accepts.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# Panda hand in the tool frame, metres: axis-aligned boxes (min, max) measured from the
# simulator's collision meshes (panda_gripper_hand_collision, panda_link7_collision).
HAND_BOXES = (
    ((-0.100, -0.032, -0.123), (0.104, 0.032, -0.031)),  # palm
    ((-0.088, -0.044, -0.152), (0.054, 0.044, -0.097)),  # flange (link 7)
)
# One finger at full opening (width 0.08): x from the inner face outwards, y, z.
FINGER_DEPTH_M = 0.026  # outer face minus inner face along the finger axis
FINGER_Y = (-0.010, 0.010)
FINGER_Z = (-0.044, 0.011)
OPEN_WIDTH_M = 0.08


def finger_boxes(width_m: float) -> list[tuple[tuple[float, float, float], tuple[float, float, float]]]:
    """Boxes (lo, hi) of both fingers opened to `width_m` (clamped to [0, 0.08]), tool frame."""
    half = 0.5 * min(max(width_m, 0.0), OPEN_WIDTH_M)
    boxes = []
    for sign in (-1.0, 1.0):
        inner, outer = sign * half, sign * (half + FINGER_DEPTH_M)
        boxes.append(((min(inner, outer), FINGER_Y[0], FINGER_Z[0]), (max(inner, outer), FINGER_Y[1], FINGER_Z[1])))
    return boxes


def box_distance(points: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """Euclidean distance (N,) of points (N, 3) to the box [lo, hi] (0 inside)."""
    out: FloatArray = np.linalg.norm(np.maximum(np.maximum(lo - points, points - hi), 0.0), axis=1)
    return out
