"""Replay protection for signed messages.

* `SenderOrder` (the robot drivers, for what the shield signs): each signed message carries
  the shield's session and a sequence number; a driver takes each once and in order, which
  holds whatever the clocks do.
* `SeenSignatures` (operator requests, signed decisions): which signatures were already
  accepted, while their stamps are fresh.

For `SeenSignatures`, a signed message is accepted once, and only while fresh (its stamp
within `max_age_s` of the receiver's clock). So a signature must be remembered for as long as its stamp could still pass
that freshness check, however many messages arrive meanwhile: remembering only the last N
signatures (the driver's guard once did, N = 256) lets a copy through once N newer ones have
pushed it out while its stamp is still fresh, e.g. 6.4 s of the shield's 40 Hz heartbeat
while a slow simulation (a real-time factor of 0.15) advanced its clock by less than 1 s.
Entries are forgotten, oldest first, once their stamp is more than twice `max_age_s` behind
the clock (twice: a margin for stamps that arrive out of order), but the last `keep_last`
always stay (a simulator reset sets the clock back, and what was signed just before it must
not pass as new), and never more than `limit` stay: a memory bound that decides only while
the clock stands still (a paused simulation).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path


class SeenSignatures:
    """The signatures accepted recently, with their stamps (seconds, the receiver's clock)."""

    def __init__(self, max_age_s: float, limit: int, keep_last: int = 256) -> None:
        if max_age_s <= 0 or not 0 <= keep_last <= limit:
            raise ValueError(f"need max_age_s > 0 and 0 <= keep_last <= limit, got {max_age_s}, {keep_last}, {limit}")
        self.max_age_s, self.limit, self.keep_last = max_age_s, limit, keep_last
        self._seen: OrderedDict[str, float] = OrderedDict()

    def __contains__(self, signature: object) -> bool:
        return signature in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, signature: str, stamp_s: float, now_s: float) -> None:
        """Remember an accepted signature; forget those that can no longer pass as fresh."""
        self._seen[signature] = stamp_s
        horizon = now_s - 2.0 * self.max_age_s
        while len(self._seen) > self.limit or (
            len(self._seen) > self.keep_last and next(iter(self._seen.values())) < horizon
        ):
            self._seen.popitem(last=False)


class SenderOrder:
    """The order in which a receiver took one sender's signed messages: per topic, the
    sender's session (a random number it draws at start) and the sequence of the newest
    message taken.

    A message is taken once and in order: its sequence must be above the newest taken on
    its topic in its session; a message of a session the receiver has seen replaced (a
    sender that restarted) is refused whatever it holds. Unlike a time window, this holds
    when the clocks jump: after a simulator reset or a clock set back, a captured message
    stamped to look fresh again is still behind the sequence already taken.

    The state is kept in `path` (beside the driver's e-stop latch) when one is given, so a
    receiver that restarts still knows what it took: written at once when a session
    changes, else at most every `save_period_s` of the monotonic clock (a message signed in
    that last moment before a crash could be taken twice; its stamp must still be fresh).
    A file that cannot be read is reported in `load_error`; the caller fails closed."""

    RETIRED_KEPT = 64

    def __init__(self, path: Path | None, save_period_s: float = 1.0) -> None:
        self.path, self.save_period_s = path, save_period_s
        self.newest: dict[str, tuple[int, int]] = {}  # topic -> (session, sequence)
        self.retired: list[int] = []  # sessions seen replaced, oldest first
        self.load_error = ""
        self.save_error = ""
        self._saved_mono = -float("inf")
        if path is not None and path.exists():
            try:
                data = json.loads(path.read_text())
                self.newest = {str(t): (int(s), int(q)) for t, (s, q) in data["newest"].items()}
                self.retired = [int(s) for s in data["retired"]][-self.RETIRED_KEPT :]
            except (OSError, ValueError, TypeError, KeyError) as exc:
                self.newest, self.retired = {}, []
                self.load_error = f"replay state {path} unreadable ({exc!r})"

    def check(self, topic: str, session: int, sequence: int) -> str | None:
        """Why this message is not new (None: it is)."""
        if session <= 0 or sequence <= 0:
            return "no session or sequence (not signed by a shield of this version)"
        if session in self.retired:
            return f"from an earlier run of the shield (session {session:x}, since replaced): a replay"
        newest = self.newest.get(topic)
        if newest is not None and newest[0] == session and sequence <= newest[1]:
            return f"sequence {sequence} is not after {newest[1]}, already taken on {topic}: a replay"
        return None

    def take(self, topic: str, session: int, sequence: int, mono_s: float) -> None:
        """Record a message that passed `check` (and its signature)."""
        changed = False
        for other in {s for s, _ in self.newest.values()} - {session}:
            self.retired = [*[s for s in self.retired if s != other], other][-self.RETIRED_KEPT :]
            changed = True
        if changed:
            self.newest = {t: v for t, v in self.newest.items() if v[0] == session}
        changed = changed or topic not in self.newest
        self.newest[topic] = (session, sequence)
        if changed or mono_s - self._saved_mono >= self.save_period_s:
            self._save(mono_s)

    def _save(self, mono_s: float) -> None:
        if self.path is None:
            return
        self._saved_mono = mono_s
        try:
            tmp = self.path.with_suffix(self.path.suffix + ".tmp")
            tmp.write_text(json.dumps({"newest": self.newest, "retired": self.retired}))
            tmp.replace(self.path)  # atomic; no fsync: written up to 40 times a minute on the control path
            self.save_error = ""
        except OSError as exc:
            self.save_error = f"replay state {self.path} not saved ({exc}): a restarted driver would not know it"
