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
    Signed,
    create_key_file,
    load_key,
    sign,
)
from carryon_common.core.errors import ConfigError

KEY = bytes(range(32))


def guard(tmp_path: Path, *, key: bytes | None = KEY, timeout_s: float = 0.2) -> CommandGuard:
    latch = EstopLatch(tmp_path / "driver-estop.json", LatchState(False, "not engaged since start-up", "driver"))
    return CommandGuard(key, latch, timeout_s)


_SEQUENCE = iter(range(1, 10**6))
SESSION = 0x5EED


def msg(
    payload: bytes, stamp_s: float, key: bytes | None = KEY, *, topic: str = "shield/chunk", sequence: int = 0
) -> Signed:
    """A message as the shield would sign it (key None: unsigned), numbered in order."""
    number = sequence or next(_SEQUENCE)
    data = payload + f" {stamp_s} {number}".encode()
    return Signed(topic, data, sign(key, data) if key else "", stamp_s, SESSION, number)


def state(active: bool, stamp_s: float, key: bytes | None = KEY) -> tuple[Signed, LatchState]:
    return msg(b"state", stamp_s, key, topic="estop/state"), LatchState(active, "why", "shield_node", stamp_s)


def beat(stamp_s: float, key: bytes | None = KEY) -> Signed:
    return msg(b"beat", stamp_s, key, topic="shield/heartbeat")


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


def test_only_fresh_chunks_signed_with_the_key_are_admitted_once_in_order(tmp_path: Path) -> None:
    g = guard(tmp_path)
    assert g.admit_chunk(msg(b"chunk", 1.0, None), 1.0, 0.0) == "unsigned: not released by the shield, refused"
    assert "signature does not match" in (g.admit_chunk(msg(b"chunk", 1.0, b"x" * 32), 1.0, 0.0) or "")
    edited = msg(b"chunk", 1.0)
    edited = Signed(edited.topic, edited.payload + b", edited", edited.signature, 1.0, SESSION, edited.sequence)
    assert "does not match" in (g.admit_chunk(edited, 1.0, 0.0) or "")
    first = msg(b"chunk 1", 1.0)
    assert g.admit_chunk(first, now_s=1.05, mono_s=0.0) is None
    assert "a replay" in (g.admit_chunk(first, 1.1, 0.0) or "")  # the same message again
    old = msg(b"chunk 0", 1.0)  # signed, never seen, but stamped 5 s ago: recorded and replayed later
    assert "+5.000 s from the driver's clock (limit 1 s)" in (g.admit_chunk(old, 6.0, 0.0) or "")
    earlier = msg(b"chunk", 6.0, sequence=first.sequence - 1)  # signed before `first`, taken after it
    assert "is not after" in (g.admit_chunk(earlier, 6.0, 0.0) or "")
    assert g.refused == 6
    # Without a key (a node started alone) nothing is verified, and nothing waits for a heartbeat.
    open_guard = guard(tmp_path / "open", key=None)
    assert open_guard.admit_chunk(msg(b"chunk", 1.0, None), 1.0, 0.0) is None and open_guard.blocked(5.0) is None


def test_a_replay_is_refused_after_the_clock_is_set_back_to_its_stamp(tmp_path: Path) -> None:
    """The probe of issue 43: after a simulator reset set the driver's clock back, a release
    and a chunk captured earlier were replayed at their old stamps and moved the arm. Their
    sequence numbers come before what the driver already took, whatever the clock says."""
    g = guard(tmp_path)
    assert g.on_heartbeat(beat(5.0), 5.0, 100.0) is None
    release, release_state = state(False, 5.1)
    chunk = msg(b"chunk", 5.2)
    g.engage("operator", "cli", 5.15)
    assert g.on_state(release, release_state, 5.15, 100.1) is None and not g.estop
    assert g.admit_chunk(chunk, 5.2, 100.2) is None
    g.engage("operator stops the arm", "cli", 30.0)
    g.clock_reset()  # a simulator reset: the clock starts again at 0 and runs to the captured stamps
    assert g.observe_clock(5.1) is None
    assert "a replay" in (g.on_state(release, release_state, 5.1, 101.0) or "") and g.estop
    assert "a replay" in (g.admit_chunk(chunk, 5.2, 101.0) or "")


def test_a_new_session_replaces_the_old_one_which_is_refused_from_then_on(tmp_path: Path) -> None:
    g = guard(tmp_path)
    old = msg(b"chunk", 1.0)
    assert g.admit_chunk(old, 1.0, 0.0) is None
    data = b"restarted shield"
    fresh = Signed("shield/chunk", data, sign(KEY, data), 1.1, SESSION + 1, 1)  # its sequence starts again
    assert g.admit_chunk(fresh, 1.1, 0.0) is None
    data = b"the old shield's next one"
    late = Signed("shield/chunk", data, sign(KEY, data), 1.2, SESSION, old.sequence + 1)
    assert "earlier run of the shield" in (g.admit_chunk(late, 1.2, 0.0) or "")
    unnumbered = Signed("shield/chunk", data, sign(KEY, data), 1.2, 0, 0)
    assert "no session or sequence" in (g.admit_chunk(unnumbered, 1.2, 0.0) or "")


def test_the_order_taken_survives_a_restart_of_the_driver(tmp_path: Path) -> None:
    from carryon_common.core.command_auth import order_path
    from carryon_common.core.replay import SenderOrder

    latch_file = tmp_path / "driver-estop.json"
    path = order_path(latch_file)
    assert path is not None
    first = CommandGuard(KEY, EstopLatch(latch_file, LatchState(False, "start", "d")), 0.2, order=SenderOrder(path))
    chunk = msg(b"chunk", 1.0)
    assert first.admit_chunk(chunk, 1.0, 0.0) is None
    again = CommandGuard(KEY, EstopLatch(latch_file, LatchState(False, "start", "d")), 0.2, order=SenderOrder(path))
    assert "a replay" in (again.admit_chunk(chunk, 1.0, 0.0) or "")
    path.write_text("{not json")
    broken = CommandGuard(KEY, EstopLatch(latch_file, LatchState(False, "start", "d")), 0.2, order=SenderOrder(path))
    assert broken.estop and "replay state" in broken.latch.state.reason  # fails closed


def test_a_clock_that_jumps_back_engages_the_latch_unless_the_driver_set_it_back(tmp_path: Path) -> None:
    g = guard(tmp_path)
    assert g.observe_clock(10.0) is None and g.observe_clock(10.05) is None
    assert g.observe_clock(10.0) is None  # 50 ms back: within the tolerance (0.1 s)
    assert "jumped back 5.000 s" in (g.observe_clock(5.0) or "")
    assert g.estop and "jumped back" in g.latch.state.reason
    # Released only by a new signed state, as after any engage.
    release, release_state = state(False, 5.0)
    assert g.on_state(release, release_state, 5.0, 0.0) is None and not g.estop
    g.clock_reset()  # the driver's own reset: not a jump
    assert g.observe_clock(0.0) is None and not g.estop


def test_engage_always_release_only_fresh_and_signed_heartbeats_only_feed_the_watchdog(tmp_path: Path) -> None:
    g = guard(tmp_path)
    assert g.blocked(0.0) == "no heartbeat from the shield yet"
    assert g.on_heartbeat(beat(1.0), now_s=1.0, mono_s=100.0) is None
    assert g.blocked(100.1) is None
    assert "no heartbeat from the shield for 250 ms" in (g.blocked(100.25) or "")
    assert g.on_heartbeat(beat(1.3, b"z" * 32), now_s=1.3, mono_s=100.3) == "signature does not match"
    assert g.blocked(100.3) is not None  # a forged heartbeat does not keep the arm moving

    # An unsigned engage is followed (stopping is never refused) ...
    engage, s = state(True, 2.0, None)
    assert g.on_state(engage, s, now_s=2.0, mono_s=0.0) is None  # followed, not ignored
    assert g.estop and "unverified: unsigned" in g.latch.state.reason
    # ... an unsigned or forged release is not ...
    release, s = state(False, 3.0, None)
    assert g.on_state(release, s, now_s=3.0, mono_s=0.0) == "unsigned"
    release, s = state(False, 3.0, b"y" * 32)
    assert g.on_state(release, s, now_s=3.0, mono_s=0.0) == "signature does not match"
    assert g.estop
    # ... nor a signed release of long ago (a replay: the operator released something else then) ...
    release, s = state(False, 1.5)
    assert "from the driver's clock" in (g.on_state(release, s, now_s=3.2, mono_s=0.0) or "")
    assert g.estop and "emergency stop engaged" in (g.blocked(100.3) or "")
    # ... and heartbeats never change the latch, whatever they say.
    g.on_heartbeat(beat(3.3), now_s=3.3, mono_s=103.3)
    assert g.estop
    # The shield's signed release, stamped now, releases it.
    release, s = state(False, 4.0)
    assert g.on_state(release, s, now_s=4.05, mono_s=0.0) is None
    assert not g.estop and g.blocked(103.35) is None
    # A stale release while nothing is engaged (the shield's latched state on start-up) is no news.
    release, s = state(False, 0.5)
    assert g.on_state(release, s, now_s=9.0, mono_s=0.0) is None


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
    assert g.on_heartbeat(beat(1.0), now_s=1.0, mono_s=100.0) is None
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
    assert g.admit_chunk(msg(b"chunk 1", 1.0), now_s=3.5, mono_s=0.0) is None  # 2.5 s old: within 3 s
    assert "+3.500 s from the driver's clock (limit 3 s)" in (g.admit_chunk(msg(b"chunk 2", 1.0), 4.5, 0.0) or "")


@pytest.mark.parametrize("signature", ["é" * 64, "\udcff", "x" * 10_000, "\x00"])
def test_any_text_as_a_signature_is_refused_never_raised(tmp_path: Path, signature: str) -> None:
    """A signature field holding non-ASCII text made hmac.compare_digest raise TypeError,
    which killed the driver's process (issue 43)."""
    g = guard(tmp_path)
    forged = Signed("shield/chunk", b"chunk", signature, 1.0, SESSION, 1)
    assert "does not match" in (g.admit_chunk(forged, now_s=1.0, mono_s=0.0) or "")
