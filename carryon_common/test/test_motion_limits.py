"""The per-step motion limits every driver and the shield share (carryon_common.core.driver,
issue 46): the tool's turn, each joint's move, and how far an IK solution may miss."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from carryon_common.core.chunk import Chunk, ChunkSource, Convention, InvalidChunk
from carryon_common.core.driver import (
    LIMITS,
    MotionLimits,
    check_limits,
    ik_beyond_limits,
    joint_step_beyond_limits,
    turn_beyond_limits,
)

DT = 0.05  # 20 Hz, the drivers' control rate
DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])  # the tool pointing down, as at home
HOME_Q = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785])


def turned(angle_rad: float, rotation: np.ndarray = DOWN) -> np.ndarray:
    """`rotation` turned about world z (the tool's axis when it points down)."""
    out: np.ndarray = Rotation.from_euler("z", angle_rad).as_matrix() @ rotation
    return out


def absolute(yaws: list[float], dt: float = DT) -> Chunk:
    """An ABSOLUTE chunk standing still at one place, the tool turned to each yaw in turn."""
    n = len(yaws)
    rotvecs = np.array([Rotation.from_matrix(turned(y)).as_rotvec() for y in yaws])
    return Chunk(1, "s1", ChunkSource.POLICY, Convention.ABSOLUTE, "world", dt, 1, 0.0,
                 np.tile([0.5, 0.0, 0.8], (n, 1)), rotvecs, np.zeros(n))  # fmt: skip


def delta(rotvecs: list[list[float]], dt: float = DT) -> Chunk:
    n = len(rotvecs)
    return Chunk(1, "s1", ChunkSource.POLICY, Convention.DELTA, "world", dt, 1, 0.0, np.zeros((n, 3)),
                 np.array(rotvecs, dtype=np.float64), np.zeros(n))  # fmt: skip


def test_the_limits_hold_what_carryons_policies_do() -> None:
    """The stand-ins yaw at 1.5 rad/s (0.075 rad per step at 20 Hz), the tool's target turning
    up to 0.128 rad in a step, their joints up to 0.107 rad (measured: MotionLimits)."""
    assert LIMITS.turn_limit_rad(DT) == pytest.approx(0.15)
    assert LIMITS.joint_step_limit_rad(DT) == pytest.approx(2.61 * DT)
    assert LIMITS.turn_limit_rad(0.5) == LIMITS.max_turn_rad  # slow chunks: the per-step cap
    assert LIMITS.joint_step_limit_rad(0.5) == LIMITS.max_joint_step_rad
    assert LIMITS.turn_limit_rad(math.nan) == 0.0 and LIMITS.joint_step_limit_rad(-1.0) == 0.0
    check_limits(absolute([0.075 * i for i in range(20)]))  # the stand-in's fastest yaw
    assert turn_beyond_limits(DOWN, turned(0.128), DT) is None  # the largest turn measured
    assert joint_step_beyond_limits(HOME_Q, HOME_Q + np.array([0, 0, 0, 0.104, 0.107, 0, 0.103]), DT) is None
    check_limits(delta([[0.0, 0.0, 0.075]] * 20))


def test_a_chunk_turning_the_tool_beyond_the_limit_in_one_step_is_refused() -> None:
    with pytest.raises(InvalidChunk, match=r"step 2: the tool would turn 180 deg in one step \(limit 11 deg\)"):
        check_limits(absolute([0.0, 0.05, math.pi + 0.05]))  # a half turn of the wrist between steps 1 and 2
    with pytest.raises(InvalidChunk, match=r"step 1: the tool would turn at 3.80 rad/s \(limit 3 rad/s\)"):
        check_limits(absolute([0.0, 0.19]))  # under the per-step cap, too fast at 20 Hz
    with pytest.raises(InvalidChunk, match="step 3: the tool would turn 17 deg"):
        check_limits(delta([[0.0, 0.0, 0.05]] * 3 + [[0.3, 0.0, 0.0]]))  # DELTA rotations are steps themselves
    check_limits(absolute([0.0, 0.19], dt=0.1))  # the same turn in 0.1 s is fine
    check_limits(delta([[0.0, 0.0, 2 * math.pi]]))  # a full turn of a delta is no turn at all


def test_a_turn_from_the_previous_target_is_checked_per_step() -> None:
    assert turn_beyond_limits(DOWN, turned(0.09), DT) is None
    assert "turn 180 deg in one step" in str(turn_beyond_limits(DOWN, turned(math.pi), DT))
    assert "rad/s" in str(turn_beyond_limits(DOWN, turned(0.09), 0.01))
    for broken in (np.full((3, 3), math.nan), turned(0.01) + np.array([[math.nan, 0, 0], [0, 0, 0], [0, 0, 0]])):
        assert turn_beyond_limits(DOWN, broken, DT) is not None  # NaN fails closed
    assert turn_beyond_limits(DOWN, turned(0.01), math.nan) is not None
    assert turn_beyond_limits(DOWN, turned(0.01), 0.0) is not None


def test_a_joint_step_is_checked_against_the_speed_and_the_cap() -> None:
    step = HOME_Q.copy()
    step[6] += 0.12  # 2.4 rad/s at 20 Hz: within 2.61 rad/s
    assert joint_step_beyond_limits(HOME_Q, step, DT) is None
    step[0] -= 0.15  # joint 1 at 3 rad/s
    reason = joint_step_beyond_limits(HOME_Q, step, DT)
    assert reason is not None and reason.startswith("joint 1 would move 0.150 rad in one step")
    assert joint_step_beyond_limits(HOME_Q, step, 0.1) is None  # the same move in 0.1 s
    step[3] += 0.3  # beyond the per-step cap at any dt
    assert "joint 4 would move 0.300 rad" in str(joint_step_beyond_limits(HOME_Q, step, 0.5))
    assert joint_step_beyond_limits(HOME_Q, HOME_Q + math.nan, DT) is not None  # NaN fails closed
    assert joint_step_beyond_limits(HOME_Q, HOME_Q, math.nan) is not None
    assert joint_step_beyond_limits(HOME_Q, HOME_Q[:6], DT) is not None  # a joint missing
    tighter = MotionLimits(max_joint_step_rad=0.05)
    assert joint_step_beyond_limits(HOME_Q, HOME_Q + 0.06, 0.5, tighter) is not None


def test_ik_solutions_that_miss_the_pose_are_refused() -> None:
    assert ik_beyond_limits(0.002, 0.01) is None
    assert "IK error 12.0 mm" in str(ik_beyond_limits(0.012, 0.0))
    assert "IK rotation error 0.200 rad" in str(ik_beyond_limits(0.0, 0.2))
    assert ik_beyond_limits(math.nan, 0.0) is not None and ik_beyond_limits(0.0, math.nan) is not None


@pytest.mark.parametrize("convention", list(Convention))
def test_rotation_vectors_longer_than_a_full_turn_are_refused(convention: Convention) -> None:
    """None is needed (a rotation's vector is at most pi long) and a huge one means nothing in
    floating point (scipy cannot even make a rotation of 1e300 rad): refused, for the first
    ABSOLUTE step too, which no check between steps would see."""
    for length in (2 * math.pi + 0.01, 1e9, 1e300):
        chunk = Chunk(1, "s1", ChunkSource.POLICY, convention, "world", DT, 1, 0.0, np.zeros((1, 3)),
                      np.array([[length, 0.0, 0.0]]), np.zeros(1))  # fmt: skip
        with pytest.raises(InvalidChunk, match=r"step 0: a rotation vector of .* rad is longer than a full turn"):
            check_limits(chunk)
