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
from carryon_common.core.replay import SenderOrder

KEY_BYTES = 32


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


def order_path(latch: Path | None) -> Path | None:
    """Where a driver keeps the order of the shield's messages it took (core/replay.py
    SenderOrder): beside its e-stop latch, so both survive a restart or neither does."""
    return None if latch is None else latch.with_name(latch.stem + "-order.json")


def latch_path(setting: str, node_name: str) -> Path | None:
    """Where a node keeps its e-stop latch: `setting` when given, else the run folder of
    `carryon up` (state/<node>-estop.json), else nowhere (memory only)."""
    if setting:
        return Path(setting).expanduser()
    run_dir = os.environ.get(RUN_DIR_ENV)
    return Path(run_dir) / "state" / f"{node_name}-estop.json" if run_dir else None


@dataclass(frozen=True)
class Signed:
    """A message signed with the command key, as a driver checks it: the relative topic it
    arrived on and its canonical bytes (carryon_common.signing.payload: the signature covers
    both), its signature, its stamp (the shield's clock, s), and the shield's session and
    sequence number (core/replay.py SenderOrder)."""

    topic: str
    payload: bytes
    signature: str
    stamp_s: float
    session: int
    sequence: int


class CommandGuard:
    """The driver's side: its own e-stop latch, the shield's signature on every chunk and
    e-stop state, and the shield's heartbeat. Without a key (a node started on its own, in
    a unit test) nothing is verified and no heartbeat is required.

    A signed message is taken once, in order, and only while fresh: its sequence must come
    after the newest taken from the shield's session on its topic (`SenderOrder`, kept with
    the latch so a restarted driver still knows), and its stamp (the shield's clock) within
    `max_age_s` of the driver's clock `now_s` (the same clock in a graph: sim time in
    simulation; on two PCs keep them synchronised). Signatures cover the topic too (see
    signing.payload): a heartbeat cannot be replayed as an e-stop state. The heartbeat's age
    is measured on the monotonic clock `mono_s`: it is about the shield's process being
    alive, whatever the simulator's real-time factor.

    The driver's clock must not jump back (`observe_clock`): a jump back of more than
    `max_clock_jump_back_s` engages the latch until an operator releases it with a new
    signed state, unless the driver set its clock back itself (`clock_reset`, e.g. a
    simulator reset an operator asked for)."""

    def __init__(
        self,
        key: bytes | None,
        latch: EstopLatch,
        heartbeat_timeout_s: float,
        *,
        max_age_s: float = 1.0,
        heartbeat_pause_s: float | None = None,
        order: SenderOrder | None = None,
        max_clock_jump_back_s: float = 0.1,
    ) -> None:
        self.key = key
        self.latch = latch
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.heartbeat_pause_s = heartbeat_timeout_s if heartbeat_pause_s is None else heartbeat_pause_s
        self.max_age_s = max_age_s
        self.max_clock_jump_back_s = max_clock_jump_back_s
        self.last_heartbeat_mono: float | None = None  # monotonic time of the latest valid heartbeat
        self.order = order if order is not None else SenderOrder(None)
        self.refused = 0  # forged, replayed, stale or unsigned messages
        self._clock_s: float | None = None  # the driver's clock when last observed
        if self.order.load_error and not latch.state.active:
            latch.set(LatchState(True, f"{self.order.load_error}: engaged", "driver", 0.0))

    @property
    def estop(self) -> bool:
        return self.latch.state.active

    def admit_chunk(self, msg: Signed, now_s: float, mono_s: float) -> str | None:
        """Why a released chunk must not be queued (None: queue it)."""
        if self.key is None:
            return None
        reason = self._check(msg, now_s, mono_s)
        return None if reason is None else f"{reason}: not released by the shield, refused"

    def on_state(self, msg: Signed, state: LatchState, now_s: float, mono_s: float) -> str | None:
        """The shield's e-stop state (estop/state). An engage is always followed, signed or
        not: stopping is never refused. A release must verify, come after every state taken
        before, and be fresh (stamped within `max_age_s`: the operator released it just now,
        not a copy of an earlier release). Returns why the message was ignored, or None."""
        reason = self._check(msg, now_s, mono_s) if self.key is not None else None
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

    def on_heartbeat(self, msg: Signed, now_s: float, mono_s: float) -> str | None:
        """The shield's heartbeat: it only feeds the watchdog (it neither engages nor
        releases: a heartbeat sent just before a release may arrive after it)."""
        if self.key is None:
            return None
        reason = self._check(msg, now_s, mono_s)
        if reason is None:
            self.last_heartbeat_mono = mono_s
        return reason

    def engage(self, reason: str, source: str, now_s: float) -> None:
        self.latch.set(LatchState(True, reason, source, now_s))

    def observe_clock(self, now_s: float) -> str | None:
        """Check the driver's clock against its last reading: a jump back engages the latch
        (returns why, once). A captured message is no longer stale on a clock set back to
        its time; the sequence numbers refuse it anyway, and the operator decides whether
        to go on."""
        last, self._clock_s = self._clock_s, now_s
        if last is None or not now_s < last - self.max_clock_jump_back_s:
            return None
        reason = (
            f"the driver's clock jumped back {last - now_s:.3f} s (from {last:.3f} to {now_s:.3f} s): "
            "engaged until an operator releases it"
        )
        if not self.latch.state.active:
            self.latch.set(LatchState(True, reason, "driver clock", now_s))
        return reason

    def clock_reset(self) -> None:
        """The driver sets its own clock back (a simulator reset an operator asked for): the
        next reading starts the clock check again."""
        self._clock_s = None

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

    def _check(self, msg: Signed, now_s: float, mono_s: float) -> str | None:
        assert self.key is not None
        reason = None
        if not msg.signature:
            reason = "unsigned"
        elif not verify(self.key, msg.payload, msg.signature):
            reason = "signature does not match"
        elif (not_new := self.order.check(msg.topic, msg.session, msg.sequence)) is not None:
            reason = not_new
        elif not abs(now_s - msg.stamp_s) <= self.max_age_s:  # written so that a NaN stamp is refused
            offset = now_s - msg.stamp_s
            limit = f"(limit {self.max_age_s:g} s)"
            reason = f"stamped {msg.stamp_s:.3f} s, {offset:+.3f} s from the driver's clock {limit}"
        if reason is not None:
            self.refused += 1
            return reason
        self.order.take(msg.topic, msg.session, msg.sequence, mono_s)
        return None
