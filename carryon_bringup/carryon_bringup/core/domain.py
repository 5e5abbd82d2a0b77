"""ROS_DOMAIN_ID reservations for tests, benchmarks and the demo on one machine.

Each run takes its own domain so parallel runs never see each other's nodes. IDs come
from 1..101: 0 is every ROS machine's default, and on Linux higher IDs map DDS ports
into the ephemeral port range (binds can then fail at random). A reservation is an
exclusive `flock` on a file in the temp folder, held while the reservation object lives
and released automatically when the process exits.
"""

from __future__ import annotations

import fcntl
import random
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import IO

DOMAIN_POOL = range(1, 102)


class NoFreeDomainError(RuntimeError):
    """Every domain id of the pool is reserved by another run."""


class DomainReservation:
    """An exclusively held ROS_DOMAIN_ID; `release()` (or process exit) frees it."""

    def __init__(self, domain_id: int, lock: IO[str]) -> None:
        self.domain_id = domain_id
        self._lock: IO[str] | None = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file drops the flock
            self._lock = None


def lock_path(domain_id: int) -> Path:
    return Path(tempfile.gettempdir()) / f"carryon-ros-domain-{domain_id}.lock"


def reserve_domain_id(exclude: Iterable[int] = ()) -> DomainReservation:
    """Reserve a free domain id from DOMAIN_POOL (in random order), skipping `exclude`."""
    skip = set(exclude)
    candidates = [d for d in DOMAIN_POOL if d not in skip]
    random.SystemRandom().shuffle(candidates)
    for domain_id in candidates:
        lock = lock_path(domain_id).open("w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return DomainReservation(domain_id, lock)
    raise NoFreeDomainError(f"all ROS domain ids {DOMAIN_POOL.start}..{DOMAIN_POOL.stop - 1} are reserved")
