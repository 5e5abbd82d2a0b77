from __future__ import annotations

import dataclasses

import numpy as np

from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_shield.core.gate import Decision, ShieldDecision, ShieldGate


def chunk(stamp_s: float = 100.0, n: int = 3) -> Chunk:
    return Chunk(
        chunk_id=1,
        subtask_id="s1",
        source=ChunkSource.POLICY,
        convention=Convention.DELTA,
        frame_id="world",
        dt=0.05,
        observation_id=5,
        observation_stamp_s=stamp_s,
        positions=np.zeros((n, 3)),
        rotations=np.zeros((n, 3)),
        gripper=np.zeros(n),
    )


def gate(**kwargs: object) -> ShieldGate:
    return ShieldGate(max_observation_age_s=0.5, threshold_m=0.03, **kwargs)  # type: ignore[arg-type]


def test_without_a_filter_the_gate_fails_closed() -> None:
    decision = gate().decide(chunk(), now_s=100.1)
    assert decision.decision == Decision.REJECTED_NO_PERCEPTION
    assert decision.released is None and decision.released_steps == 0
    assert decision.total_steps == 3


def test_estop_wins_over_everything() -> None:
    calls: list[Chunk] = []

    def release_all(c: Chunk, _now_s: float) -> ShieldDecision:
        calls.append(c)
        return ShieldDecision(
            c.chunk_id, c.subtask_id, Decision.RELEASED_ALL, len(c), len(c), 0.03, "clear", released=c
        )

    g = gate(chunk_filter=release_all, estop_active=True)
    assert g.decide(chunk(), now_s=100.1).decision == Decision.REJECTED_ESTOP
    assert calls == []
    g.estop_active = False
    assert g.decide(chunk(), now_s=100.1).decision == Decision.RELEASED_ALL


def test_stale_and_future_observations_are_rejected() -> None:
    g = gate(chunk_filter=lambda c, now: None)  # never reached
    stale = g.decide(chunk(stamp_s=99.0), now_s=100.0)
    assert stale.decision == Decision.REJECTED_STALE
    assert "1.000 s old" in stale.reason
    assert g.decide(chunk(stamp_s=101.0), now_s=100.0).decision == Decision.REJECTED_STALE


def test_invalid_chunk_is_rejected_before_the_filter() -> None:
    assert gate().decide(chunk(n=0), now_s=100.0).decision == Decision.REJECTED_INVALID


def test_a_chunk_beyond_the_motion_limits_is_rejected_before_the_filter() -> None:
    long = gate().decide(chunk(n=10_000), now_s=100.0)
    assert long.decision == Decision.REJECTED_INVALID and "more than the limit of 200" in long.reason
    slow = gate().decide(dataclasses.replace(chunk(), dt=1e9), now_s=100.0)
    assert slow.decision == Decision.REJECTED_INVALID and "dt" in slow.reason


def test_decision_values_match_the_interface() -> None:
    from carryon_interfaces.msg import ShieldEvent

    for decision in Decision:
        assert getattr(ShieldEvent, f"DECISION_{decision.name}") == decision.value
