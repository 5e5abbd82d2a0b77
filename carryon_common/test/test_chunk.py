from __future__ import annotations

import numpy as np
import pytest
from builtin_interfaces.msg import Time

from carryon_common import convert
from carryon_common.core.chunk import Chunk, ChunkSource, Convention, InvalidChunk


def make_chunk(n: int = 4, **overrides: object) -> Chunk:
    values: dict[str, object] = {
        "chunk_id": 7,
        "subtask_id": "s1",
        "source": ChunkSource.POLICY,
        "convention": Convention.DELTA,
        "frame_id": "world",
        "dt": 0.05,
        "observation_id": 42,
        "observation_stamp_s": 12.25,
        "positions": np.linspace(0.0, 0.03, 3 * n).reshape(n, 3),
        "rotations": np.zeros((n, 3)),
        "gripper": np.full(n, 0.5),
    }
    values.update(overrides)
    return Chunk(**values)  # type: ignore[arg-type]


def test_valid_chunk_passes() -> None:
    make_chunk().validate()


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"positions": np.zeros((0, 3)), "rotations": np.zeros((0, 3)), "gripper": np.zeros(0)}, "no steps"),
        ({"dt": 0.0}, "dt must be"),
        ({"gripper": np.array([0.0, 0.2, 1.5, 0.0])}, r"\[0, 1\]"),
        ({"positions": np.array([[0, 0, 0], [np.nan, 0, 0], [0, 0, 0], [0, 0, 0]], dtype=float)}, "NaN"),
        ({"rotations": np.zeros((3, 3))}, "inconsistent shapes"),
        ({"frame_id": ""}, "frame_id"),
    ],
)
def test_invalid_chunks_are_refused_with_reason(overrides: dict[str, object], reason: str) -> None:
    with pytest.raises(InvalidChunk, match=reason):
        make_chunk(**overrides).validate()


def test_message_round_trip_keeps_every_field() -> None:
    chunk = make_chunk()
    back = convert.chunk_from_msg(convert.chunk_to_msg(chunk, Time(sec=3, nanosec=5)))
    assert (back.chunk_id, back.subtask_id, back.source, back.convention) == (
        7,
        "s1",
        ChunkSource.POLICY,
        Convention.DELTA,
    )
    assert back.frame_id == "world"
    assert back.dt == pytest.approx(0.05)
    assert back.observation_stamp_s == pytest.approx(12.25)
    np.testing.assert_allclose(back.positions, chunk.positions)
    np.testing.assert_allclose(back.gripper, chunk.gripper, rtol=1e-6)


def test_unknown_convention_in_message_is_invalid() -> None:
    msg = convert.chunk_to_msg(make_chunk(), Time())
    msg.convention = 9
    with pytest.raises(InvalidChunk):
        convert.chunk_from_msg(msg)


def test_enum_values_match_the_interface() -> None:
    from carryon_interfaces.msg import ActionChunk

    assert Convention.ABSOLUTE == ActionChunk.CONVENTION_ABSOLUTE
    assert ChunkSource.RETREAT == ActionChunk.SOURCE_RETREAT


# -- motion limits (carryon_common.core.driver): what no driver executes, whoever sent it ------------
@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"positions": np.zeros((10_000, 3)), "rotations": np.zeros((10_000, 3)), "gripper": np.zeros(10_000)},
         "10000 steps: more than the limit of 200"),
        ({"dt": 1e9}, r"dt 1e\+09 s is outside the limits"),
        ({"dt": 1e-4}, "outside the limits"),
        ({"positions": np.array([[0, 0, 0], [0, 0, 0.08], [0, 0, 0], [0, 0, 0]], dtype=float)},
         "step 1: the tool would move 80 mm in one step"),
        ({"convention": Convention.ABSOLUTE,
          "positions": np.array([[0.5, 0, 0.6], [0.5, 0, 0.6], [0.5, 0.35, 0.6], [0.5, 0.35, 0.6]])},
         "step 2: the tool would move 350 mm in one step"),
        ({"dt": 0.01, "positions": np.tile([0.0, 0.015, 0.0], (4, 1))}, r"1\.50 m/s \(limit 1 m/s\)"),
    ],
)  # fmt: skip
def test_chunks_beyond_the_motion_limits_are_not_executable(overrides: dict[str, object], reason: str) -> None:
    from carryon_common.core.driver import check_executable

    bad = make_chunk(**overrides)
    bad.validate()  # well-formed: only the limits refuse it
    with pytest.raises(InvalidChunk, match=reason):
        check_executable(bad, estop=False)


def test_a_step_is_checked_against_the_previous_target_too() -> None:
    from carryon_common.core.driver import MotionLimits, check_executable, step_beyond_limits

    check_executable(make_chunk(), estop=False)  # 1-3 mm steps at 20 Hz: fine
    here = np.array([0.5, 0.0, 0.6])
    assert step_beyond_limits(here, here + np.array([0.0, 0.0, 0.01]), 0.05) is None
    assert "350 mm" in str(step_beyond_limits(here, here + np.array([0.0, 0.35, 0.0]), 0.05))
    assert "m/s" in str(step_beyond_limits(here, here + np.array([0.0, 0.02, 0.0]), 0.01))
    assert step_beyond_limits(here, here + np.array([0.0, 0.2, 0.0]), 0.5, MotionLimits(max_step_m=0.3)) is None
    with pytest.raises(InvalidChunk, match="emergency stop"):  # the e-stop is named first
        check_executable(make_chunk(dt=1e9), estop=True)
