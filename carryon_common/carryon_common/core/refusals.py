"""What a node refused or failed on, per topic or service (issue 43): the bookkeeping behind
CarryOnNode's callback barrier (carryon_common.barrier), free of ROS so it is tested alone.

A message refused as invalid (`InvalidMessage`) and an exception from a callback (a bug a
message uncovered) are counted apart; each (where, exception type) is logged in full the
first time, then at most every `log_every_s` with how many more there were, so a flood of
malformed messages neither hides the first one nor fills the log."""

from __future__ import annotations

import threading
from dataclasses import dataclass

_REASON_CHARS = 300  # of a reason kept for the status line and the log


def printable(text: str, max_chars: int = _REASON_CHARS, *, keep_newlines: bool = False) -> str:
    """`text` cut to `max_chars` with every unprintable character (controls, surrogates,
    bidirectional overrides) escaped, so a message's content cannot forge log lines or
    fail to encode when logged or published."""
    cut = text if len(text) <= max_chars else f"{text[:max_chars]}..."
    return "".join(c if c.isprintable() or (keep_newlines and c == "\n") else ascii(c)[1:-1] for c in cut)


@dataclass(frozen=True)
class Report:
    """What to log for one recorded refusal: `first` in full (with the traceback for an
    error); else `suppressed` more since the last line (0: nothing to log now)."""

    first: bool
    suppressed: int


class Refusals:
    """Thread-safe counts of refused messages and callback errors. Times are seconds on any
    monotonic clock (`now_s`)."""

    def __init__(self, log_every_s: float = 10.0) -> None:
        self.log_every_s = log_every_s
        self._lock = threading.Lock()
        self.refused = 0  # messages refused as invalid
        self.errors = 0  # callbacks that raised anything else
        self.last_refused = ""  # "where: reason" of the latest of each
        self.last_error = ""
        self._keys: dict[tuple[str, str], list[float]] = {}  # (where, kind) -> [last logged, unlogged count]

    def record(self, where: str, kind: str, reason: str, now_s: float, *, invalid: bool) -> Report:
        """Count one refusal (`invalid`) or error at `where` (a topic or service) of exception
        type `kind`, and say what to log now."""
        line = f"{where}: {printable(reason)}"
        with self._lock:
            if invalid:
                self.refused += 1
                self.last_refused = line
            else:
                self.errors += 1
                self.last_error = line
            seen = self._keys.get((where, kind))
            if seen is None:
                self._keys[(where, kind)] = [now_s, 0.0]
                return Report(first=True, suppressed=0)
            seen[1] += 1
            if now_s - seen[0] < self.log_every_s:
                return Report(first=False, suppressed=0)
            suppressed, seen[0], seen[1] = int(seen[1]), now_s, 0.0
            return Report(first=False, suppressed=suppressed)

    def lines(self) -> tuple[str, ...]:
        """The node's status lines (`role=value`, as its backends): none while nothing happened."""
        with self._lock:
            out = []
            if self.refused:
                out.append(f"refused messages={self.refused} (last: {self.last_refused})")
            if self.errors:
                out.append(f"callback errors={self.errors} (last: {self.last_error})")
            return tuple(out)
