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


def test_only_chunks_signed_with_the_key_are_admitted_once(tmp_path: Path) -> None:
    g = guard(tmp_path)
    payload = b"chunk 1"
    assert g.admit_chunk(payload, "", 1.0) == "unsigned: not released by the shield, refused"
    assert "signature does not match" in (g.admit_chunk(payload, sign(b"x" * 32, payload), 1.0) or "")
    assert "does not match" in (g.admit_chunk(b"chunk 1, edited", sign(KEY, payload), 1.0) or "")
    assert g.admit_chunk(payload, sign(KEY, payload), 1.0) is None
    assert "replay" in (g.admit_chunk(payload, sign(KEY, payload), 1.0) or "")
    older = b"chunk 0"
    assert "older than one already received" in (g.admit_chunk(older, sign(KEY, older), 0.5) or "")
    assert g.refused == 5
    # Without a key (a node started alone) nothing is verified, and nothing waits for a heartbeat.
    open_guard = guard(tmp_path / "open", key=None)
    assert open_guard.admit_chunk(payload, "", 1.0) is None and open_guard.blocked(5.0) is None


def test_engage_always_release_only_signed_and_newer_heartbeats_feed_the_watchdog(tmp_path: Path) -> None:
    g = guard(tmp_path)
    assert g.blocked(0.0) == "no heartbeat from the shield yet"
    beat, s = state(False, 1.0, b"beat")
    assert g.on_shield_state(beat, sign(KEY, beat), s, now_s=1.0, heartbeat=True) is None
    assert g.blocked(1.1) is None
    assert "no heartbeat from the shield for 250 ms" in (g.blocked(1.25) or "")
    forged_beat, s = state(False, 1.3, b"beat")
    assert g.on_shield_state(forged_beat, "00" * 32, s, now_s=1.3, heartbeat=True) == "signature does not match"
    assert g.blocked(1.3) is not None  # a forged heartbeat does not keep the arm moving

    # An unsigned engage is followed (stopping is never refused) ...
    payload, s = state(True, 2.0)
    assert g.on_shield_state(payload, "", s, now_s=2.0, heartbeat=False) == "unsigned"
    assert g.estop and "unverified" in g.latch.state.reason
    # ... an unsigned or forged release is not ...
    payload, s = state(False, 3.0)
    g.on_shield_state(payload, "", s, now_s=3.0, heartbeat=False)
    g.on_shield_state(payload, sign(b"y" * 32, payload), s, now_s=3.0, heartbeat=False)
    assert g.estop
    # ... nor a signed heartbeat saying "not engaged" (it never releases) ...
    beat, s = state(False, 3.1, b"beat")
    assert g.on_shield_state(beat, sign(KEY, beat), s, now_s=3.1, heartbeat=True) is None
    assert g.estop and g.blocked(3.1) is not None and "emergency stop engaged" in (g.blocked(3.1) or "")
    # ... nor a signed release older than the engage (a replay of an earlier release).
    payload, s = state(False, 1.5)
    assert "older than the engage" in (g.on_shield_state(payload, sign(KEY, payload), s, 3.2, heartbeat=False) or "")
    assert g.estop
    # The shield's signed release, stamped after the engage, releases it.
    payload, s = state(False, 4.0)
    assert g.on_shield_state(payload, sign(KEY, payload), s, now_s=4.0, heartbeat=False) is None
    assert not g.estop and "no heartbeat from the shield for 900 ms" in (g.blocked(4.0) or "")
    beat, s = state(False, 4.0, b"beat")
    g.on_shield_state(beat, sign(KEY, beat), s, now_s=4.0, heartbeat=True)
    assert g.blocked(4.1) is None
    # The driver's own engage is ended only by a release stamped after it.
    g.engage("operator", "cli", now_s=5.0)
    payload, s = state(False, 4.5)
    g.on_shield_state(payload, sign(KEY, payload), s, now_s=5.1, heartbeat=False)
    assert g.estop


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
