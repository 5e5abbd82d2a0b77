"""The command key, the persisted e-stop latch and the driver's CommandGuard: forged,
replayed and unsigned chunks refused; engages always followed, releases only when signed
and newer than the engage; the shield's heartbeat feeds the watchdog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from carryon_common.core.command_auth import (
    CommandGuard,
    EstopLatch,
    LatchState,
    create_key_file,
    load_key,
    sign,
)
from carryon_common.core.errors import ConfigError

KEY = bytes(range(32))


def guard(tmp_path: Path, *, key: bytes | None = KEY, timeout_s: float = 0.2) -> CommandGuard:
    latch = EstopLatch(tmp_path / "driver-estop.json", LatchState(False, "not engaged since start-up", "driver"))
    return CommandGuard(key, latch, timeout_s)


def state(active: bool, stamp_s: float, payload: bytes = b"state") -> tuple[bytes, LatchState]:
    return payload + str(stamp_s).encode(), LatchState(active, "why", "shield_node", stamp_s)


def test_a_key_file_is_made_owner_only_and_checked(tmp_path: Path) -> None:
    path = create_key_file(tmp_path / "keys" / "command.key")
    assert path.stat().st_mode & 0o777 == 0o600 and len(load_key(path)) == 32
    first = path.read_text()
    assert create_key_file(path).read_text() == first  # kept, never overwritten
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="readable by other users"):
        load_key(path)
    with pytest.raises(ConfigError, match="carryon keys init"):
        load_key(tmp_path / "missing.key")
    short = tmp_path / "short.key"
    short.write_text("abcd")
    short.chmod(0o600)
    with pytest.raises(ConfigError, match="fewer than 32"):
        load_key(short)


def test_only_fresh_chunks_signed_with_the_key_are_admitted_once(tmp_path: Path) -> None:
    g = guard(tmp_path)
    payload = b"chunk 1"
    assert g.admit_chunk(payload, "", 1.0, now_s=1.0) == "unsigned: not released by the shield, refused"
    assert "signature does not match" in (g.admit_chunk(payload, sign(b"x" * 32, payload), 1.0, 1.0) or "")
    assert "does not match" in (g.admit_chunk(b"chunk 1, edited", sign(KEY, payload), 1.0, 1.0) or "")
    assert g.admit_chunk(payload, sign(KEY, payload), 1.0, now_s=1.05) is None
    assert "replay" in (g.admit_chunk(payload, sign(KEY, payload), 1.0, now_s=1.1) or "")
    old = b"chunk 0"  # signed, never seen, but stamped 5 s ago: recorded and replayed later
    assert "+5.000 s from the driver's clock (limit 1 s)" in (g.admit_chunk(old, sign(KEY, old), 1.0, 6.0) or "")
    assert g.refused == 5
    # After a simulator reset the clock starts again: fresh stamps near 0 are fine.
    fresh = b"chunk 2"
    assert g.admit_chunk(fresh, sign(KEY, fresh), 0.2, now_s=0.25) is None
    # Without a key (a node started alone) nothing is verified, and nothing waits for a heartbeat.
    open_guard = guard(tmp_path / "open", key=None)
    assert open_guard.admit_chunk(payload, "", 1.0, 1.0) is None and open_guard.blocked(5.0) is None


def test_engage_always_release_only_fresh_and_signed_heartbeats_only_feed_the_watchdog(tmp_path: Path) -> None:
    g = guard(tmp_path)
    assert g.blocked(0.0) == "no heartbeat from the shield yet"
    beat = b"beat 1"
    assert g.on_heartbeat(beat, sign(KEY, beat), 1.0, now_s=1.0, mono_s=100.0) is None
    assert g.blocked(100.1) is None
    assert "no heartbeat from the shield for 250 ms" in (g.blocked(100.25) or "")
    forged = b"beat 2"
    assert g.on_heartbeat(forged, "00" * 32, 1.3, now_s=1.3, mono_s=100.3) == "signature does not match"
    assert g.blocked(100.3) is not None  # a forged heartbeat does not keep the arm moving

    # An unsigned engage is followed (stopping is never refused) ...
    payload, s = state(True, 2.0)
    assert g.on_state(payload, "", s, now_s=2.0) is None  # followed, not ignored
    assert g.estop and "unverified: unsigned" in g.latch.state.reason
    # ... an unsigned or forged release is not ...
    payload, s = state(False, 3.0)
    assert g.on_state(payload, "", s, now_s=3.0) == "unsigned"
    assert g.on_state(payload, sign(b"y" * 32, payload), s, now_s=3.0) == "signature does not match"
    assert g.estop
    # ... nor a signed release of long ago (a replay: the operator released something else then) ...
    payload, s = state(False, 1.5)
    assert "from the driver's clock" in (g.on_state(payload, sign(KEY, payload), s, now_s=3.2) or "")
    assert g.estop and "emergency stop engaged" in (g.blocked(100.3) or "")
    # ... and heartbeats never change the latch, whatever they say.
    beat = b"beat 3"
    g.on_heartbeat(beat, sign(KEY, beat), 3.3, now_s=3.3, mono_s=103.3)
    assert g.estop
    # The shield's signed release, stamped now, releases it.
    payload, s = state(False, 4.0)
    assert g.on_state(payload, sign(KEY, payload), s, now_s=4.05) is None
    assert not g.estop and g.blocked(103.35) is None
    # A stale release while nothing is engaged (the shield's latched state on start-up) is no news.
    payload, s = state(False, 0.5)
    assert g.on_state(payload, sign(KEY, payload), s, now_s=9.0) is None


def test_the_latch_survives_a_restart_and_fails_closed_on_a_bad_file(tmp_path: Path) -> None:
    path = tmp_path / "driver-estop.json"
    latch = EstopLatch(path, LatchState(False, "start", "driver"))
    assert not latch.found_on_disk
    latch.set(LatchState(True, "operator stop", "cli", 7.0))
    again = EstopLatch(path, LatchState(False, "start", "driver"))
    assert again.found_on_disk and again.state == LatchState(True, "operator stop", "cli", 7.0)
    path.write_text("{not json")
    broken = EstopLatch(path, LatchState(False, "start", "driver"))
    assert broken.state.active and "unreadable" in broken.state.reason
    assert json.loads(path.read_text())["active"] is True  # and the engaged state is what is on disk now
    memory_only = EstopLatch(None, LatchState(False, "start", "driver"))
    memory_only.set(LatchState(True, "x", "y"))
    assert memory_only.state.active


def test_a_late_heartbeat_pauses_before_the_timeout_ends_the_chunk(tmp_path: Path) -> None:
    latch = EstopLatch(tmp_path / "driver-estop.json", LatchState(False, "not engaged since start-up", "driver"))
    g = CommandGuard(KEY, latch, 0.4, heartbeat_pause_s=0.1)
    assert g.paused(0.0) is None  # before the first heartbeat `blocked` says why
    beat = b"beat 1"
    assert g.on_heartbeat(beat, sign(KEY, beat), 1.0, now_s=1.0, mono_s=100.0) is None
    assert g.paused(100.05) is None and g.blocked(100.05) is None
    assert "for 150 ms: paused" in (g.paused(100.15) or "") and g.blocked(100.15) is None
    assert g.blocked(100.45) is not None  # the timeout: the chunk ends
    assert CommandGuard(None, latch, 0.4, heartbeat_pause_s=0.1).paused(200.0) is None  # no key: nothing waits


def test_the_pause_may_not_come_after_the_timeout() -> None:
    from carryon_common.core.driver import DriverCommandConfig

    with pytest.raises(ValueError, match="must not exceed"):
        DriverCommandConfig(shield_heartbeat_pause_s=0.5, shield_heartbeat_timeout_s=0.4)


def test_the_freshness_limit_is_the_drivers_setting(tmp_path: Path) -> None:
    """command_max_age_s (two PCs whose clocks drift apart, a loaded machine) bounds the stamp's age."""
    from carryon_common.core.driver import DriverCommandConfig

    assert DriverCommandConfig().command_max_age_s == 1.0
    with pytest.raises(ValueError):
        DriverCommandConfig(command_max_age_s=0.0)
    latch = EstopLatch(tmp_path / "driver-estop.json", LatchState(False, "not engaged since start-up", "driver"))
    g = CommandGuard(KEY, latch, 0.2, max_age_s=DriverCommandConfig(command_max_age_s=3.0).command_max_age_s)
    late, later = b"chunk 1", b"chunk 2"
    assert g.admit_chunk(late, sign(KEY, late), 1.0, now_s=3.5) is None  # 2.5 s old: within 3 s
    assert "+3.500 s from the driver's clock (limit 3 s)" in (g.admit_chunk(later, sign(KEY, later), 1.0, 4.5) or "")


@pytest.mark.parametrize("signature", ["é" * 64, "\udcff", "x" * 10_000, "\x00"])
def test_any_text_as_a_signature_is_refused_never_raised(tmp_path: Path, signature: str) -> None:
    """A signature field holding non-ASCII text made hmac.compare_digest raise TypeError,
    which killed the driver's process (issue 43)."""
    g = guard(tmp_path)
    assert "does not match" in (g.admit_chunk(b"chunk", signature, 1.0, now_s=1.0) or "")
