"""What never becomes a chunk, and how observations go stale."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from carryon_common.core.chunk import Convention
from carryon_policy.core.checks import check_output
from carryon_policy.core.observation import EePose, Joints, ObservationBuffer, StaleObservation, Width
from carryon_policy.core.policy import InvalidAction, PolicyOutput

HERE = np.array([0.5, 0.0, 0.8])
# The tool pointing down, fingers closing along world y.
DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])


def yaw_rotvec(yaw: float) -> np.ndarray:
    """Rotation vector of the downward tool turned by `yaw` about world z."""
    return Rotation.from_matrix(Rotation.from_euler("z", yaw).as_matrix() @ DOWN).as_rotvec()


def output(positions: np.ndarray, convention: Convention = Convention.ABSOLUTE, **kw: np.ndarray) -> PolicyOutput:
    n = len(positions)
    return PolicyOutput(
        positions, kw.get("rotations", np.tile(yaw_rotvec(0.0), (n, 1))), kw.get("gripper", np.zeros(n)), convention
    )


def check(out: PolicyOutput) -> None:
    check_output(out, HERE, max_step_m=0.05, max_step_rad=0.5)


def test_a_smooth_chunk_passes_even_where_rotation_vectors_flip_sign() -> None:
    yaws = np.linspace(-0.2, 0.2, 16)  # the downward tool's rotation vector is near pi
    path = HERE + np.outer(np.arange(1, 17) * 0.01, [1, 0, 0])
    check(output(path, rotations=np.stack([yaw_rotvec(y) for y in yaws])))


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda p, r, g: p.__setitem__((3, 0), math.nan), "positions contain NaN"),
        (lambda p, r, g: r.__setitem__((2, 1), math.inf), "rotations contain NaN or infinity"),
        (lambda p, r, g: g.__setitem__(5, 1.5), r"gripper commands outside \[0, 1\]"),
        (lambda p, r, g: p.__setitem__((7, 2), 2.0), "step 7 moves"),
        (lambda p, r, g: r.__setitem__(4, yaw_rotvec(1.2)), "step 3 turns"),
    ],
)
def test_invalid_outputs_raise_with_the_reason(mutate, reason: str) -> None:  # type: ignore[no-untyped-def]
    positions = HERE + np.outer(np.arange(1, 17) * 0.01, [1, 0, 0])
    rotations = np.tile(yaw_rotvec(0.0), (16, 1))
    gripper = np.zeros(16)
    mutate(positions, rotations, gripper)
    with pytest.raises(InvalidAction, match=reason):
        check(output(positions, rotations=rotations, gripper=gripper))


def test_delta_steps_are_bounded_one_by_one() -> None:
    check(output(np.full((8, 3), 0.01), Convention.DELTA, rotations=np.zeros((8, 3))))
    with pytest.raises(InvalidAction, match=r"step 0 moves 104 mm"):
        check(output(np.full((8, 3), 0.06), Convention.DELTA, rotations=np.zeros((8, 3))))


def test_the_first_absolute_step_is_measured_from_where_the_tool_is() -> None:
    with pytest.raises(InvalidAction, match="step 0 moves 300 mm"):
        check(output(np.tile(HERE + np.array([0.3, 0.0, 0.0]), (4, 1))))


def test_stale_or_missing_parts_are_named() -> None:
    buffer = ObservationBuffer(cameras=("scene",), needs_truth=True, max_age_s=0.5)
    with pytest.raises(StaleObservation, match=r"ee_pose: nothing received.*camera/scene/color.*sim/truth"):
        buffer.build(10.0)
    buffer.ee = EePose(9.0, HERE, np.eye(3), "world")
    buffer.joints = Joints(9.9, np.zeros(7))
    buffer.width = Width(9.9, 0.08)
    buffer.needs_truth, buffer.cameras = False, ()
    with pytest.raises(StaleObservation, match=r"ee_pose: 1.00 s old \(max 0.50 s\)"):
        buffer.build(10.0)
    buffer.ee = EePose(9.8, HERE, np.eye(3), "world")
    first, second = buffer.build(10.0), buffer.build(10.0)
    assert first.stamp_s == pytest.approx(9.8)  # the oldest part
    assert second.observation_id == first.observation_id + 1
