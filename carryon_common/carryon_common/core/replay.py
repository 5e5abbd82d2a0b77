"""Replay protection for signed messages: which signatures were already accepted.

A signed message is accepted once, and only while fresh (its stamp within `max_age_s` of the
receiver's clock). So a signature must be remembered for as long as its stamp could still pass
that freshness check, however many messages arrive meanwhile: remembering only the last N
signatures (the driver's guard did, N = 256) lets a copy through once N newer ones have
pushed it out while its stamp is still fresh, e.g. 6.4 s of the shield's 40 Hz heartbeat
while a slow simulation (a real-time factor of 0.15) advanced its clock by less than 1 s.
Entries are forgotten, oldest first, once their stamp is more than twice `max_age_s` behind
the clock (twice: a margin for stamps that arrive out of order), but the last `keep_last`
always stay (a simulator reset sets the clock back, and what was signed just before it must
not pass as new), and never more than `limit` stay: a memory bound that decides only while
the clock stands still (a paused simulation).
"""

from __future__ import annotations

from collections import OrderedDict


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
