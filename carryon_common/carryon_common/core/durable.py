"""Crash-safe file writes.

`atomic_write`: write a temporary file in the same folder, fsync it, rename it over the
target, fsync the folder. A reader (or a process killed at any instant) sees the old file
or the new one, never a mix. Used by memory's store and the planner's learned kinds.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

TEMP_MARK = ".tmp-"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_path(target: Path) -> Path:
    """A temporary name beside `target`, marked with `TEMP_MARK` so that the folder's owner
    (memory's `MemoryStore`) can remove what killed writers left."""
    return target.with_name(f".{target.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd` (os.write may write less) and fsync it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def atomic_write(target: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Replace `target` by `data` atomically and durably (temp file, fsync, rename, fsync dir)."""
    tmp = temp_path(target)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            write_all(fd, data)
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
