"""Atomic, journaled writes to a memory folder, one transaction at a time across processes.

Writes are transactions, one at a time across processes (`WriteLock`). Under the lock
a writer first finishes what a dead writer left (see below), re-reads the files it
changes (never trusting a cache, so concurrent writers lose no update), derives the
next version from the journal, then commits in this order:

1. snapshots of every content before/after each change -> history/ (fsync'd);
2. the marker `{"txn", "journal_size"}` -> .lock (fsync'd): "a transaction is in flight";
3. the transaction's journal lines, one write + fsync: **the commit point**;
4. each changed file replaced atomically (temp, fsync, rename; folders fsync'd);
5. the marker cleared.

A writer killed before 3 completes leaves a marker and maybe a torn journal tail: the
next writer cuts the journal back to `journal_size` (the change never happened, the
files were never touched). Killed after 3: the next writer rolls the files forward to
the committed snapshots. Either way every file always parses and equals a committed
version; readers in the window between 3 and 4 see the previous committed version.
Stray temporary files of killed writers are removed when a store opens.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from carryon_common.core.durable import TEMP_MARK, atomic_write, fsync_dir, read_bytes
from carryon_memory.core.files import IMAGES_DIR, USERS_DIR, valid_file
from carryon_memory.core.journal import HISTORY_DIR, Journal, sha256
from carryon_memory.core.types import Change
from carryon_memory.core.write_lock import WriteLock

LOCK_FILE = ".lock"


@dataclass(frozen=True)
class _Step:
    file: str
    op: str
    entity: str
    key: str
    previous: str
    new: str
    source: str
    before: bytes | None
    after: bytes | None


class Transaction:
    """The changes of one write, staged in memory until `commit`."""

    def __init__(self, writer: Writer, lock_fd: int) -> None:
        self._writer = writer
        self._fd = lock_fd
        self._current: dict[str, bytes | None] = {}
        self._steps: list[_Step] = []

    def read(self, rel: str) -> bytes | None:
        """The file's bytes as of this transaction (re-read from disk, never from a cache)."""
        if rel not in self._current:
            self._current[rel] = read_bytes(self._writer.root / rel)
        return self._current[rel]

    def record(
        self,
        rel: str,
        op: str,
        *,
        source: str,
        after: bytes | None,
        entity: str = "",
        key: str = "",
        previous: str = "",
        new: str = "",
    ) -> None:
        """Stage one change of `rel` whose result is `after` (None = delete). No-ops are dropped."""
        before = self.read(rel)
        if after == before:
            return
        self._steps.append(_Step(rel, op, entity, key, previous, new, source, before, after))
        self._current[rel] = after

    def record_edit(self, rel: str, known: bytes | None, *, source: str) -> None:
        """Stage op "edit": `rel` was changed outside the store (by hand) from `known`, the
        content the journal last gave it (None = absent), to what is on disk now. That content
        becomes a version of its own, so `restore` can bring it back exactly. Call it before any
        other change of `rel` in the transaction; a no-op when the two are equal."""
        current = self.read(rel)
        if current != known:
            self._steps.append(_Step(rel, "edit", "", "", "", "", source, known, current))

    def commit(self, now: float) -> list[Change]:
        """Write the staged changes durably (see the module docstring for the order)."""
        if not self._steps:
            return []
        journal = self._writer.journal
        first = journal.next_version()
        changes = []
        for index, step in enumerate(self._steps):
            changes.append(
                Change(
                    version=first + index,
                    txn=first,
                    txn_size=len(self._steps),
                    time_s=now,
                    file=step.file,
                    op=step.op,
                    entity=step.entity,
                    key=step.key,
                    previous_value=step.previous,
                    new_value=step.new,
                    source=step.source,
                    before=sha256(step.before) if step.before is not None else None,
                    after=sha256(step.after) if step.after is not None else None,
                )
            )
        contents = {data for step in self._steps for data in (step.before, step.after) if data is not None}
        journal.save_snapshots(sorted(contents))
        size = journal.path.stat().st_size if journal.path.exists() else 0
        _write_marker(self._fd, json.dumps({"txn": first, "journal_size": size}).encode())
        journal.append(changes)
        folders = set()
        for rel in dict.fromkeys(step.file for step in self._steps):
            self._writer.put(rel, self._current[rel])
            folders.add((self._writer.root / rel).parent)
        for folder in folders:
            fsync_dir(folder)
        _write_marker(self._fd, b"", sync=False)
        return changes


def _write_marker(fd: int, data: bytes, *, sync: bool = True) -> None:
    os.ftruncate(fd, 0)
    if data:
        os.pwrite(fd, data, 0)
    if sync:
        os.fsync(fd)


class Writer:
    """The write side of the memory folder `root`: the write lock, transactions and crash recovery.

    lock_timeout_s: longest wait for the write lock, seconds. Creating a writer finishes a
    transaction a killed writer left behind (taking the write lock).
    """

    def __init__(self, root: Path, journal: Journal, lock_timeout_s: float) -> None:
        self.root = root
        self.journal = journal
        self._lock = WriteLock(root / LOCK_FILE, lock_timeout_s)
        self.recovered: list[str] = []  # what opening (or a later write) repaired, for the log
        with self._lock.hold() as fd:
            self._recover(fd, sweep=True)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Hold the write lock, finish a dead writer's transaction, and stage a new one."""
        with self._lock.hold() as fd:
            self._recover(fd)
            self.journal.refresh()
            yield Transaction(self, fd)

    def put(self, rel: str, data: bytes | None) -> None:
        """Replace (or delete, for None) one file atomically; the caller holds the lock."""
        path = self.root / rel
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data, sync_dir=False)

    # -- crash recovery (under the write lock) -----------------------------------------
    def _recover(self, fd: int, *, sweep: bool = False) -> None:
        marker = os.pread(fd, 4096, 0)
        if marker.strip():
            self.journal.refresh()
            try:
                info = json.loads(marker)
                txn, size = int(info["txn"]), int(info["journal_size"])
            except (ValueError, KeyError, TypeError):
                self.recovered.append(f"{LOCK_FILE}: unreadable transaction marker {marker[:80]!r}; ignored")
            else:
                changes = self.journal.committed(txn)
                if changes:
                    final = {change.file: change.after for change in changes}
                    for rel, sha in final.items():
                        if not valid_file(rel):
                            continue
                        data = None if sha is None else self.journal.snapshot(sha)
                        if read_bytes(self.root / rel) != data:
                            self.put(rel, data)
                            fsync_dir((self.root / rel).parent)
                    self.recovered.append(f"rolled forward transaction {txn} of a writer that died after committing")
                else:
                    self.journal.truncate(size)
                    self.recovered.append(f"discarded transaction {txn} of a writer that died before committing")
            sweep = True
        if sweep:
            self._remove_temp_files()
        if marker:
            _write_marker(fd, b"")

    def _remove_temp_files(self) -> None:
        """Temporary files are only written under the lock: the ones found now are orphans."""
        for folder in (self.root, self.root / USERS_DIR, self.root / HISTORY_DIR, self.root / IMAGES_DIR):
            candidates = folder.rglob(f"*{TEMP_MARK}*") if folder.name == IMAGES_DIR else folder.glob(f"*{TEMP_MARK}*")
            for path in candidates:
                with contextlib.suppress(OSError):
                    path.unlink()
