"""Crash-safe file writes and the cross-process write lock.

* `atomic_write`: write a temporary file in the same folder, fsync it, rename it over
  the target, fsync the folder. A reader (or a process killed at any instant) sees the
  old file or the new one, never a mix.
* `WriteLock`: one writer at a time across threads and processes. A thread lock plus
  `fcntl.flock` on `<memory>/.lock`, polled without blocking so that waiting is bounded
  by `timeout_s` (flock itself has no timeout). The kernel releases a flock when its
  holder dies, so a SIGKILLed writer never leaves the store locked. The lock file also
  carries the marker of the transaction in flight (see `MemoryStore`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from carryon_memory.core.errors import LockTimeout

TEMP_MARK = ".tmp-"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(target: Path) -> Path:
    """A temporary name beside `target`; `MemoryStore` removes leftovers of killed writers."""
    return target.with_name(f".{target.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def atomic_write(target: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `target` by `data` atomically and durably (temp file, fsync, rename, fsync dir)."""
    tmp = temp_path(target)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.replace(target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if sync_dir:
        fsync_dir(target.parent)


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes, None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


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
