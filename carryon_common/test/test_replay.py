"""SeenSignatures: a signature is remembered while its stamp could still pass as fresh,
however many newer ones arrive; the last few survive a clock set back; memory is bounded."""

from __future__ import annotations

import pytest

from carryon_common.core.command_auth import CommandGuard, EstopLatch, LatchState, Signed, sign
from carryon_common.core.replay import SeenSignatures, SenderOrder

KEY = bytes(range(32))


def test_a_fresh_signature_is_remembered_past_any_count_and_forgotten_once_stale() -> None:
    seen = SeenSignatures(max_age_s=1.0, limit=10_000, keep_last=4)
    seen.add("first", 10.0, now_s=10.0)
    for i in range(1000):  # far more than keep_last, all within the freshness window
        seen.add(f"beat {i}", 10.0 + i * 0.001, now_s=10.0 + i * 0.001)
    assert "first" in seen
    seen.add("later", 13.5, now_s=13.5)  # 3.5 s on: everything stamped before 11.5 can only be stale
    assert "first" not in seen and len(seen) == 4 and "later" in seen


def test_the_last_ones_survive_a_clock_set_back_and_the_limit_bounds_memory() -> None:
    seen = SeenSignatures(max_age_s=1.0, limit=50, keep_last=8)
    for i in range(8):
        seen.add(f"s{i}", 100.0, now_s=100.0)
    seen.add("after reset", 0.1, now_s=0.1)  # a simulator reset: the clock starts again
    assert all(f"s{i}" in seen for i in range(8))
    for i in range(200):  # a paused clock: nothing goes stale, the limit decides
        seen.add(f"p{i}", 0.1, now_s=0.1)
    assert len(seen) == 50 and "p199" in seen and "p0" not in seen
    with pytest.raises(ValueError, match="keep_last <= limit"):
        SeenSignatures(1.0, limit=4, keep_last=8)


def test_the_driver_refuses_a_replayed_chunk_after_many_heartbeats_of_a_slow_simulation(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The CI case behind this: 256 heartbeats (6.4 s at 40 Hz) pushed the released chunk's
    signature out of the driver's memory while the slow simulation's clock moved < 1 s. The
    sequence numbers the shield puts on every signed message hold however many come between."""
    latch = EstopLatch(tmp_path / "estop.json", LatchState(False, "not engaged since start-up", "driver"))
    guard = CommandGuard(KEY, latch, heartbeat_timeout_s=0.2)

    def signed(topic: str, data: bytes, stamp: float, sequence: int) -> Signed:
        return Signed(topic, data, sign(KEY, data), stamp, 7, sequence)

    chunk = signed("shield/chunk", b"chunk 7", 5.0, 1)
    assert guard.admit_chunk(chunk, now_s=5.0, mono_s=0.0) is None
    for i in range(400):  # 10 s of heartbeats at 40 Hz while sim time moves 0.6 s
        stamp = 5.0 + i * 0.0015
        beat = signed("shield/heartbeat", f"beat {i}".encode(), stamp, i + 2)
        assert guard.on_heartbeat(beat, now_s=stamp, mono_s=100.0 + i / 40) is None
    assert "replay" in (guard.admit_chunk(chunk, now_s=5.6, mono_s=110.0) or "")


def test_the_sender_order_bounds_the_sessions_it_remembers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    order = SenderOrder(tmp_path / "order.json")
    for session in range(1, 200):
        assert order.check("shield/chunk", session, 1) is None
        order.take("shield/chunk", session, 1, mono_s=float(session))
    assert len(order.retired) == SenderOrder.RETIRED_KEPT and 198 in order.retired and 1 not in order.retired
    again = SenderOrder(tmp_path / "order.json")
    assert again.newest == {"shield/chunk": (199, 1)} and "earlier run" in (again.check("shield/chunk", 198, 5) or "")
