"""SeenSignatures: a signature is remembered while its stamp could still pass as fresh,
however many newer ones arrive; the last few survive a clock set back; memory is bounded."""

from __future__ import annotations

import pytest

from carryon_common.core.command_auth import CommandGuard, EstopLatch, LatchState, sign
from carryon_common.core.replay import SeenSignatures

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
    signature out of the driver's memory while the slow simulation's clock moved < 1 s."""
    latch = EstopLatch(tmp_path / "estop.json", LatchState(False, "not engaged since start-up", "driver"))
    guard = CommandGuard(KEY, latch, heartbeat_timeout_s=0.2)
    chunk = b"chunk 7"
    assert guard.admit_chunk(chunk, sign(KEY, chunk), 5.0, now_s=5.0) is None
    for i in range(400):  # 10 s of heartbeats at 40 Hz while sim time moves 0.6 s
        beat = f"beat {i}".encode()
        stamp = 5.0 + i * 0.0015
        assert guard.on_heartbeat(beat, sign(KEY, beat), stamp, now_s=stamp, mono_s=100.0 + i / 40) is None
    assert "replay" in (guard.admit_chunk(chunk, sign(KEY, chunk), 5.0, now_s=5.6) or "")
