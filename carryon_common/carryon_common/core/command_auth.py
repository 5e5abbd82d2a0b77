"""Who may move the arm: the key the shield and the driver share, the e-stop latch each
keeps on disk, and the driver's guard that admits only what the shield signed.

* **Command key.** The shield signs every released chunk, its e-stop state and its
  heartbeat with HMAC-SHA256 under a key it shares only with the driver (sim_node or
  arm_adapter_node). `carryon up` and the launch file make a new key per run for the sim
  profile; a robot PC keeps one made by `carryon keys init` (docs/security.md). A driver
  with a key executes nothing that does not verify, whoever published it on the DDS domain.
* **E-stop latch.** The shield and every driver keep their own latched e-stop in a small
  JSON file, written atomically on every change and read at start-up: a node that
  restarts comes back in the state it left, and a shield that restarts comes back engaged.
* **Shield heartbeat.** A driver with a key executes a step only while the shield's
  signed heartbeat is fresh: a frozen or dead shield stops the arm within the timeout,
  whatever the driver's queue still holds.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from carryon_common.core.errors import ConfigError
from carryon_common.core.names import RUN_DIR_ENV
from carryon_common.core.replay import SeenSignatures

KEY_BYTES = 32
_REPLAYS_KEPT = 16384  # bounds memory only while the clock stands still (core/replay.py)


def create_key_file(path: Path) -> Path:
    """Write a new random key (hex) readable by its owner only; an existing file is kept."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(KEY_BYTES) + "\n")
    return path


def load_key(path: Path) -> bytes:
    """The key in `path`; ConfigError names what is wrong (missing, readable by others, short)."""
    path = path.expanduser()
    try:
        mode = path.stat().st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(
            f"command key {path}: {exc.strerror or exc}; make one with `carryon keys init --path {path}`"
        ) from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"command key {path} is readable by other users (mode {mode & 0o777:o}); chmod 600 it")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ConfigError(f"command key {path} is not hex text") from None
    if len(key) < KEY_BYTES:
        raise ConfigError(f"command key {path} has {len(key)} bytes, fewer than {KEY_BYTES}")
    return key


def sign(key: bytes, payload: bytes) -> str:
    return hmac.new(key, payload, hashlib.sha256).hexdigest()


def verify(key: bytes, payload: bytes, signature: str) -> bool:
    """Whether `signature` is the HMAC of `payload`. Any text may arrive as a signature (a
    non-ASCII one made `hmac.compare_digest` raise on str): it is compared as UTF-8 bytes."""
    return hmac.compare_digest(sign(key, payload).encode(), signature.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class LatchState:
    """An e-stop state: engaged or not, why, who changed it and when (node clock, s)."""

    active: bool
    reason: str
    source: str
    stamp_s: float = 0.0


class EstopLatch:
    """One node's latched e-stop, persisted in `path` (None: kept in memory only).

    A file that cannot be read or parsed engages the latch: a safety state that cannot be
    trusted fails closed."""

    def __init__(self, path: Path | None, initial: LatchState) -> None:
        self.path = path
        self.write_error = ""
        self.found_on_disk = False
        self.state = initial
        if path is None:
            return
        if path.exists():
            self.found_on_disk = True
            try:
                self.state = LatchState(**json.loads(path.read_text()))
            except (OSError, ValueError, TypeError) as exc:
                self.state = LatchState(True, f"e-stop latch file {path} unreadable ({exc}): engaged", "latch")
        self._write()

    def set(self, state: LatchState) -> None:
        """The new state holds at once; a failed write is kept in `write_error` (the node
        reports it), never raised: an e-stop must engage even on a full or missing disk."""
        self.state = state
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(self.path.suffix + ".tmp")
            with tmp.open("w") as out:
                json.dump(asdict(self.state), out)
                out.flush()
                os.fsync(out.fileno())
            tmp.replace(self.path)
            self.write_error = ""
        except OSError as exc:
            self.write_error = f"e-stop latch {self.path} not saved ({exc}): a restart would not keep this state"


def latch_path(setting: str, node_name: str) -> Path | None:
    """Where a node keeps its e-stop latch: `setting` when given, else the run folder of
    `carryon up` (state/<node>-estop.json), else nowhere (memory only)."""
    if setting:
        return Path(setting).expanduser()
    run_dir = os.environ.get(RUN_DIR_ENV)
    return Path(run_dir) / "state" / f"{node_name}-estop.json" if run_dir else None


class CommandGuard:
    """The driver's side: its own e-stop latch, the shield's signature on every chunk and
    e-stop state, and the shield's heartbeat. Without a key (a node started on its own, in
    a unit test) nothing is verified and no heartbeat is required.

    A signed message is accepted once, and only while fresh: its stamp (the shield's clock)
    within `max_age_s` of the driver's clock `now_s` (the same clock in a graph: sim time in
    simulation; on two PCs keep them synchronised). A replay is either a signature seen
    recently or an old stamp. Signatures cover the topic too (see signing.payload): a
    heartbeat cannot be replayed as an e-stop state. The heartbeat's age is measured on
    the monotonic clock `mono_s`: it is about the shield's process being alive, whatever
    the simulator's real-time factor."""

    def __init__(
        self,
        key: bytes | None,
        latch: EstopLatch,
        heartbeat_timeout_s: float,
        max_age_s: float = 1.0,
        heartbeat_pause_s: float | None = None,
    ) -> None:
        self.key = key
        self.latch = latch
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.heartbeat_pause_s = heartbeat_timeout_s if heartbeat_pause_s is None else heartbeat_pause_s
        self.max_age_s = max_age_s
        self.last_heartbeat_mono: float | None = None  # monotonic time of the latest valid heartbeat
        self._seen = SeenSignatures(max_age_s, _REPLAYS_KEPT)
        self.refused = 0  # forged, replayed, stale or unsigned messages

    @property
    def estop(self) -> bool:
        return self.latch.state.active

    def admit_chunk(self, payload: bytes, signature: str, stamp_s: float, now_s: float) -> str | None:
        """Why a released chunk must not be queued (None: queue it)."""
        if self.key is None:
            return None
        reason = self._check(payload, signature, stamp_s, now_s)
        return None if reason is None else f"{reason}: not released by the shield, refused"

    def on_state(self, payload: bytes, signature: str, state: LatchState, now_s: float) -> str | None:
        """The shield's e-stop state (estop/state). An engage is always followed, signed or
        not: stopping is never refused. A release must verify and be fresh (stamped within
        `max_age_s`: the operator released it just now, not a copy of an earlier release).
        Returns why the message was ignored, or None."""
        reason = self._check(payload, signature, state.stamp_s, now_s) if self.key is not None else None
        if state.active:  # followed whatever the check said: the latch's reason keeps what it found
            if not self.latch.state.active:
                note = "" if reason is None else f" (unverified: {reason})"
                self.latch.set(LatchState(True, state.reason + note, state.source, now_s))
            return None
        if not self.latch.state.active:
            return None  # nothing to release (e.g. the shield's latched state of long ago, on start-up)
        if reason is not None:
            return reason
        self.latch.set(LatchState(False, state.reason, state.source, now_s))
        return None

    def on_heartbeat(self, payload: bytes, signature: str, stamp_s: float, now_s: float, mono_s: float) -> str | None:
        """The shield's heartbeat: it only feeds the watchdog (it neither engages nor
        releases: a heartbeat sent just before a release may arrive after it)."""
        if self.key is None:
            return None
        reason = self._check(payload, signature, stamp_s, now_s)
        if reason is None:
            self.last_heartbeat_mono = mono_s
        return reason

    def engage(self, reason: str, source: str, now_s: float) -> None:
        self.latch.set(LatchState(True, reason, source, now_s))

    def blocked(self, mono_s: float) -> str | None:
        """Why no step may be executed now (None: steps may run); `mono_s` monotonic."""
        if self.latch.state.active:
            return f"emergency stop engaged ({self.latch.state.reason})"
        if self.key is None:
            return None
        if self.last_heartbeat_mono is None:
            return "no heartbeat from the shield yet"
        age = mono_s - self.last_heartbeat_mono
        if age > self.heartbeat_timeout_s:
            return (
                f"no heartbeat from the shield for {age * 1000:.0f} ms (limit {self.heartbeat_timeout_s * 1000:.0f} ms)"
            )
        return None

    def paused(self, mono_s: float) -> str | None:
        """Why steps must wait now (None: they may run): the heartbeat is older than the
        pause limit but not yet the timeout (then `blocked` says so). The arm stops where it
        is and keeps its chunk; a heartbeat in time lets it go on."""
        if self.key is None or self.last_heartbeat_mono is None:
            return None
        age = mono_s - self.last_heartbeat_mono
        if age > self.heartbeat_pause_s:
            return f"no heartbeat from the shield for {age * 1000:.0f} ms: paused"
        return None

    def _check(self, payload: bytes, signature: str, stamp_s: float, now_s: float) -> str | None:
        assert self.key is not None
        reason = None
        if not signature:
            reason = "unsigned"
        elif not verify(self.key, payload, signature):
            reason = "signature does not match"
        elif signature in self._seen:
            reason = "a replay of a message already received"
        elif abs(now_s - stamp_s) > self.max_age_s:
            offset = now_s - stamp_s
            reason = f"stamped {stamp_s:.3f} s, {offset:+.3f} s from the driver's clock (limit {self.max_age_s:g} s)"
        if reason is not None:
            self.refused += 1
            return reason
        self._seen.add(signature, stamp_s, now_s)
        return None
