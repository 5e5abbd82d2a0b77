"""The geometric filter: per-part thresholds, prefix release, retreat, fail-closed cases."""

from __future__ import annotations

import numpy as np
from shield_fixtures import DOWN, line_chunk, make_shield, obstacles_at, state_at

from carryon_common.core.chunk import ChunkSource, Convention
from carryon_shield.core.filter import NEAR_RANGE_M, GeometricShield, RetreatParams, Snapshot, Thresholds, check_poses
from carryon_shield.core.gate import Decision, ShieldGate
from carryon_shield.core.geometry import GripperGeometry, Part
from carryon_shield.core.response import ResponseModel
from carryon_shield.core.types import PerceptionUnavailable


def check_at(point: list[float], width: float = 0.08, thresholds: Thresholds | None = None):  # type: ignore[no-untyped-def]
    return check_poses(obstacles_at([point]), GripperGeometry.build(width), thresholds or Thresholds(),
                       np.zeros((1, 3)), DOWN[None])  # fmt: skip


def test_finger_threshold_applies_below_the_fingertips() -> None:
    # Fingertips reach 0.011 m below the tool centre point (world -z).
    assert check_at([0.0, 0.052, -0.011 - 0.007]).violated[0]  # 7 mm < 8 mm
    clear = check_at([0.0, 0.052, -0.011 - 0.009])
    assert not clear.violated[0]
    assert abs(clear.clearance[0] - 0.009) < 1e-9  # exact box distance, not the covering sphere's


def test_hand_threshold_is_larger_than_the_finger_threshold() -> None:
    # 15 mm beside the palm (tool y = world x, palm half width 0.032): blocked (hand 20 mm)...
    hand = check_at([0.032 + 0.015, 0.0, 0.08])
    assert hand.violated[0] and Part(int(hand.part[0])) == Part.HAND
    # ...while 15 mm beside a finger is fine (finger 8 mm).
    finger = check_at([0.010 + 0.015, 0.052, 0.0])
    assert not finger.violated[0]


def test_thresholds_are_parameters() -> None:
    point = [0.0, 0.052, -0.011 - 0.012]
    assert not check_at(point).violated[0]
    assert check_at(point, thresholds=Thresholds(fingers_m=0.015)).violated[0]


def test_clear_chunk_is_released_whole() -> None:
    shield = make_shield(obstacles_at([[0.9, 0.9, 0.4]]), state_at([0.5, 0.0, 0.6]))
    decision = shield(line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 16), 0.0)
    assert decision.decision == Decision.RELEASED_ALL
    assert decision.released is not None and len(decision.released) == 16
    assert decision.first_blocked_step == -1 and decision.min_distance_m == NEAR_RANGE_M  # a lower bound
    assert "closest >= 0.050 m" in decision.reason


def test_prefix_before_the_first_violation_is_released() -> None:
    # An obstacle point 0.12 m ahead along -y at fingertip height: the finger (outer face at
    # 0.066 along y) comes within 8 mm after ~5 steps of 1 cm.
    shield = make_shield(obstacles_at([[0.5, -0.12, 0.59]]), state_at([0.5, 0.0, 0.6]))
    decision = shield(line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 16), 0.0)
    assert decision.decision == Decision.RELEASED_PREFIX
    first = decision.first_blocked_step
    assert 3 <= first <= 6 and decision.released_steps == first
    assert decision.released is not None and len(decision.released) == first
    assert np.allclose(
        decision.released.positions, line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 16).positions[:first]
    )
    assert decision.blocking_obstacle == "bottle"
    assert np.allclose(decision.blocking_point, [0.5, -0.12, 0.59])


def test_blocked_first_step_sends_a_retreat_away_and_up() -> None:
    # Obstacle right beside the fingers on the -y side: retreat goes +y (away) and up.
    shield = make_shield(obstacles_at([[0.5, -0.072, 0.59]]), state_at([0.5, 0.0, 0.6]))
    decision = shield(line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 16), 0.0)
    assert decision.decision == Decision.RETREAT
    retreat = decision.released
    assert retreat is not None and len(retreat) == 3
    assert retreat.source == ChunkSource.RETREAT and retreat.convention == Convention.ABSOLUTE
    motion = retreat.positions[-1] - np.array([0.5, 0.0, 0.6])
    assert abs(np.linalg.norm(motion) - 0.03) < 1e-9
    assert motion[1] > 0.01 and motion[2] > 0.01  # away (+y) and up
    assert np.all(np.diff(retreat.positions[:, 2]) > 0)
    assert np.all(retreat.gripper == 0.0)  # keeps the executed gripper command


def test_retreat_keeps_a_closed_gripper_closed() -> None:
    shield = make_shield(obstacles_at([[0.5, -0.045, 0.59]]), state_at([0.5, 0.0, 0.6], width=0.03, command=1.0))
    decision = shield(line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 8), 0.0)
    assert decision.decision == Decision.RETREAT
    assert decision.released is not None and np.all(decision.released.gripper == 1.0)


def test_retreat_from_the_table_goes_straight_up() -> None:
    table = [[x, y, 0.42] for x in np.linspace(0.4, 0.6, 21) for y in np.linspace(-0.1, 0.1, 21)]
    shield = make_shield(obstacles_at(table, "table"), state_at([0.5, 0.0, 0.425]))
    decision = shield(line_chunk([0.5, 0.0, 0.425], [0.0, 0.0, -0.005], 4), 0.0)
    assert decision.decision == Decision.RETREAT
    motion = decision.released.positions[-1] - np.array([0.5, 0.0, 0.425])  # type: ignore[union-attr]
    assert motion[2] > 0.028 and np.linalg.norm(motion[:2]) < 0.2 * motion[2]  # away from the table is up


def test_disabled_shield_passes_chunks_but_reports_what_it_would_block() -> None:
    shield = make_shield(obstacles_at([[0.5, -0.12, 0.59]]), state_at([0.5, 0.0, 0.6]), enabled=False)
    chunk = line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 16)
    decision = shield(chunk, 0.0)
    assert decision.decision == Decision.RELEASED_ALL and decision.released is chunk
    assert decision.would_block and 3 <= decision.first_blocked_step <= 6
    assert "would have released" in decision.reason


def test_unknown_frame_releases_nothing() -> None:
    shield = make_shield(obstacles_at([[0.9, 0.9, 0.4]]), state_at([0.5, 0.0, 0.6]))
    decision = shield(line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 4, frame="panda_link0"), 0.0)
    assert decision.decision == Decision.REJECTED_INVALID and decision.released is None
    assert "unknown frame 'panda_link0'" in decision.reason


def test_missing_perception_releases_nothing() -> None:
    def blind(_now: float) -> Snapshot:
        raise PerceptionUnavailable("depth from camera 'scene' is 0.80 s old (limit 0.50 s)")

    shield = GeometricShield(blind, ResponseModel.identity(), Thresholds(), RetreatParams())
    decision = shield(line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 4), 0.0)
    assert decision.decision == Decision.REJECTED_NO_PERCEPTION and decision.released is None
    assert "0.80 s old" in decision.reason


def test_nan_actions_and_shield_exceptions_release_nothing() -> None:
    shield = make_shield(obstacles_at([[0.9, 0.9, 0.4]]), state_at([0.5, 0.0, 0.6]))
    gate = ShieldGate(max_observation_age_s=0.5, threshold_m=0.02, chunk_filter=shield)
    chunk = line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 4)
    chunk.positions[2, 0] = np.nan
    assert gate.decide(chunk, 0.1).decision == Decision.REJECTED_INVALID

    def broken(_chunk, _now):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("bug")

    failing = ShieldGate(max_observation_age_s=0.5, threshold_m=0.02, chunk_filter=broken)
    decision = failing.decide(line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 4), 0.1)
    assert decision.released is None and decision.decision == Decision.REJECTED_NO_PERCEPTION
    assert isinstance(decision.error, ZeroDivisionError) and "shield internal error" in decision.reason


def test_prefix_shrinks_when_the_arm_would_settle_too_close() -> None:
    # A slow (lagging) arm: predicted poses stay behind, but the arm settles at the last
    # commanded target of the prefix, which must be clear as well.
    obstacles = obstacles_at([[0.5, -0.12, 0.59]])
    state = state_at([0.5, 0.0, 0.6])
    snapshot = Snapshot(obstacles, state, GripperGeometry.build(0.08), False)
    lagging = ResponseModel(np.full(3, 0.2), np.zeros(3))
    shield = GeometricShield(lambda _now: snapshot, lagging, Thresholds(), RetreatParams())
    decision = shield(line_chunk([0.5, 0.0, 0.6], [0.0, -0.01, 0.0], 16), 0.0)
    assert decision.released is not None
    settle = decision.released.positions[-1]
    assert check_poses(obstacles, snapshot.geometry, Thresholds(), settle[None], DOWN[None]).margin[0] >= 0.0
