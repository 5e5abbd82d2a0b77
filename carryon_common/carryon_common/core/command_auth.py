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

import collections
import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from carryon_common.core.errors import ConfigError

KEY_BYTES = 32
_REPLAYS_KEPT = 256


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
    return hmac.compare_digest(sign(key, payload), signature)


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
        self.state = state
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        with tmp.open("w") as out:
            json.dump(asdict(self.state), out)
            out.flush()
            os.fsync(out.fileno())
        tmp.replace(self.path)


def latch_path(setting: str, node_name: str) -> Path | None:
    """Where a node keeps its e-stop latch: `setting` when given, else the run folder of
    `carryon up` (state/<node>-estop.json), else nowhere (memory only)."""
    if setting:
        return Path(setting).expanduser()
    run_dir = os.environ.get("CARRYON_RUN_DIR")
    return Path(run_dir) / "state" / f"{node_name}-estop.json" if run_dir else None


class CommandGuard:
    """The driver's side: its own e-stop latch, the shield's signature on every chunk and
    e-stop state, and the shield's heartbeat. Without a key (a node started on its own, in
    a unit test) nothing is verified and no heartbeat is required; `secured` says which.

    Times: `stamp_s` is the sender's stamp, `now_s` the driver's clock (the same clock in a
    graph: sim time in simulation)."""

    def __init__(self, key: bytes | None, latch: EstopLatch, heartbeat_timeout_s: float) -> None:
        self.key = key
        self.latch = latch
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.last_heartbeat_s: float | None = None  # driver clock at the latest valid heartbeat
        self.last_state_stamp_s = -float("inf")  # newest shield state stamp accepted
        self.last_heartbeat_stamp_s = -float("inf")
        self.last_chunk_stamp_s = -float("inf")
        self._seen: collections.deque[str] = collections.deque(maxlen=_REPLAYS_KEPT)
        self.refused = 0  # forged, replayed or unsigned messages

    @property
    def secured(self) -> bool:
        return self.key is not None

    @property
    def estop(self) -> bool:
        return self.latch.state.active

    def admit_chunk(self, payload: bytes, signature: str, stamp_s: float) -> str | None:
        """Why a released chunk must not be queued (None: queue it)."""
        if self.key is None:
            return None
        reason = self._check_signature(payload, signature, stamp_s, self.last_chunk_stamp_s)
        if reason is not None:
            self.refused += 1
            return f"{reason}: not released by the shield, refused"
        self.last_chunk_stamp_s = stamp_s
        return None

    def on_shield_state(
        self, payload: bytes, signature: str, state: LatchState, now_s: float, *, heartbeat: bool
    ) -> str | None:
        """The shield's e-stop state (estop/state, stamped when it changed) or heartbeat.

        An engage is always followed, signed or not: stopping is never refused. A release
        must come from the shield's state topic, verify, and be stamped after the engage
        it ends; a heartbeat feeds the watchdog when it verifies and never releases (a
        shield that was frozen while the driver was stopped at its own service must not
        release that stop when it wakes). Returns why the message was ignored, or None."""
        if self.key is not None:
            # An engage may carry any stamp (a shield restarted on sim time stamps 0 before
            # its first /clock); only what feeds the watchdog or releases must be newer.
            newest = self.last_heartbeat_stamp_s if heartbeat else self.last_state_stamp_s
            if state.active and not heartbeat:
                newest = -float("inf")
            reason = self._check_signature(payload, signature, state.stamp_s, newest)
            if reason is not None:
                self.refused += 1
                if state.active and not self.latch.state.active:
                    self.latch.set(LatchState(True, f"{state.reason} (unverified: {reason})", state.source, now_s))
                return reason
            if heartbeat:
                self.last_heartbeat_stamp_s = state.stamp_s
                self.last_heartbeat_s = now_s
            else:
                self.last_state_stamp_s = max(self.last_state_stamp_s, state.stamp_s)
        if state.active and not self.latch.state.active:
            self.latch.set(state)
        elif not state.active and self.latch.state.active and not heartbeat:
            if state.stamp_s <= self.latch.state.stamp_s:
                return f"a release stamped {state.stamp_s:.3f} s is older than the engage it would end"
            self.latch.set(state)
        return None

    def engage(self, reason: str, source: str, now_s: float) -> None:
        self.latch.set(LatchState(True, reason, source, now_s))

    def blocked(self, now_s: float) -> str | None:
        """Why no step may be executed now (None: steps may run)."""
        if self.latch.state.active:
            return f"emergency stop engaged ({self.latch.state.reason})"
        if self.key is None:
            return None
        if self.last_heartbeat_s is None:
            return "no heartbeat from the shield yet"
        age = now_s - self.last_heartbeat_s
        if age > self.heartbeat_timeout_s:
            return (
                f"no heartbeat from the shield for {age * 1000:.0f} ms (limit {self.heartbeat_timeout_s * 1000:.0f} ms)"
            )
        return None

    def _check_signature(self, payload: bytes, signature: str, stamp_s: float, newest_s: float) -> str | None:
        assert self.key is not None
        if not signature:
            return "unsigned"
        if not verify(self.key, payload, signature):
            return "signature does not match"
        if signature in self._seen:
            return "a replay of a message already received"
        if stamp_s < newest_s:
            return f"stamped {stamp_s:.3f} s, older than one already received ({newest_s:.3f} s)"
        self._seen.append(signature)
        return None
