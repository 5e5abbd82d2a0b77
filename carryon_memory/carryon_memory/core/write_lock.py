"""The cross-process write lock of the memory store.

`WriteLock`: one writer at a time across threads and processes. A thread lock plus
`fcntl.flock` on `<memory>/.lock`, polled without blocking so that waiting is bounded by
`timeout_s` (flock itself has no timeout). The kernel releases a flock when its holder
dies, so a SIGKILLed writer never leaves the store locked. The lock file also carries the
marker of the transaction in flight (see `MemoryStore`). Crash-safe writes themselves are
`carryon_common.core.durable`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from carryon_memory.core.errors import LockTimeout


class WriteLock:
    """Exclusive write lock over threads and processes, with a bounded wait.

    Use `with lock.hold() as fd:`; `fd` is the open lock file (for the transaction marker).
    """

    def __init__(self, path: Path, timeout_s: float, poll_s: float = 0.001, max_poll_s: float = 0.005) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._poll_s = poll_s
        self._max_poll_s = max_poll_s
        self._thread_lock = threading.Lock()

    @contextlib.contextmanager
    def hold(self) -> Iterator[int]:
        deadline = time.monotonic() + self.timeout_s
        if not self._thread_lock.acquire(timeout=self.timeout_s):
            raise LockTimeout(self._timeout_message("another request of this process"))
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                delay = self._poll_s
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            raise LockTimeout(self._timeout_message("another process")) from None
                        time.sleep(delay)
                        delay = min(delay * 2, self._max_poll_s)
                try:
                    yield fd
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        finally:
            self._thread_lock.release()

    def _timeout_message(self, holder: str) -> str:
        return (
            f"memory is busy: {holder} held the write lock {self.path} for more than "
            f"lock_timeout_s={self.timeout_s:g} s; nothing was changed, try again"
        )
