"""The append-only journal (`journal.jsonl`) and the snapshots it refers to (`history/`).

One JSON object per line and per change (see `Change`), appended in one write and
fsync'd. Changes made together form a transaction: its lines carry the same `txn` (its
first version) and `txn_size`. A transaction counts only when all its lines are there,
so a writer killed in the middle of an append leaves no half-applied change; that torn
tail is cut off by the next writer (under the lock, from the marker the dead writer
left). Lines that are not valid JSON, e.g. after a hand edit, are reported as
`journal.jsonl:line: reason` and skipped; versions are never reused.

Snapshots: every file content a change produced (and the content it replaced) is stored
once under `history/<sha256>.md`; restoring a version copies snapshots back.

The journal is read incrementally: `refresh()` reads only what was appended since the
last call (several processes append to it), so the newest version costs one `stat`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from carryon_common.core.durable import atomic_write, fsync_dir, write_all
from carryon_memory.core.errors import HistoryError
from carryon_memory.core.types import Change, Problem

JOURNAL_FILE = "journal.jsonl"
HISTORY_DIR = "history"
_FIELDS = tuple(Change.__dataclass_fields__)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def change_to_json(change: Change) -> str:
    return json.dumps(asdict(change), ensure_ascii=False, separators=(",", ":"))


def change_from_json(line: str) -> Change:
    """Parse one journal line; ValueError with the reason when it is not a change."""
    try:
        data: Any = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    missing = [name for name in _FIELDS if name not in data]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    try:
        change = Change(**{name: data[name] for name in _FIELDS})
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    ints = (change.version, change.txn, change.txn_size)
    if not all(isinstance(v, int) and v > 0 for v in ints) or not change.txn <= change.version:
        raise ValueError("version, txn and txn_size must be positive integers with txn <= version")
    if change.version >= change.txn + change.txn_size:
        raise ValueError(f"version {change.version} outside its transaction {change.txn} (+{change.txn_size})")
    return change


class Journal:
    """Committed changes of the journal file, kept current with `refresh()`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / JOURNAL_FILE
        self.history = root / HISTORY_DIR
        # Readers (service threads) refresh while a writer appends: one thread at a time.
        self._guard = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self.changes: list[Change] = []  # committed, in version order
        self.by_file: dict[str, list[Change]] = {}
        self.problems: list[Problem] = []
        self.max_seen = 0  # highest version on any valid line, committed or not
        self._offset = 0  # bytes consumed (complete lines only)
        self._lines = 0  # lines consumed
        self._inode = -1
        self._pending: dict[int, list[Change]] = {}  # txn -> its lines so far

    # -- reading ----------------------------------------------------------------
    @property
    def version(self) -> int:
        """The store version: the last committed change (0 for an empty journal)."""
        return self.changes[-1].version if self.changes else 0

    @property
    def committed_size(self) -> int:
        """Bytes of complete lines read so far."""
        return self._offset

    def refresh(self) -> None:
        """Read what was appended since the last call (everything after a truncation)."""
        with self._guard:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                if self._offset:
                    self._reset()
                return
            if stat.st_ino != self._inode or stat.st_size < self._offset:
                self._reset()
                self._inode = stat.st_ino
            if stat.st_size == self._offset:
                return
            with self.path.open("rb") as stream:
                stream.seek(self._offset)
                data = stream.read(stat.st_size - self._offset)
            end = data.rfind(b"\n")
            if end < 0:
                return  # only a partial line so far
            for raw in data[: end + 1].split(b"\n")[:-1]:
                self._lines += 1
                self._offset += len(raw) + 1
                self._take(raw, self._lines)

    def _take(self, raw: bytes, number: int) -> None:
        try:
            change = change_from_json(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            self.problems.append(Problem(JOURNAL_FILE, number, f"{exc}; line skipped"))
            return
        self.max_seen = max(self.max_seen, change.version)
        lines = self._pending.setdefault(change.txn, [])
        lines.append(change)
        if len(lines) == change.txn_size:
            del self._pending[change.txn]
            for committed in sorted(lines, key=lambda c: c.version):
                if committed.version <= self.version:
                    self.problems.append(
                        Problem(JOURNAL_FILE, number, f"version {committed.version} is not after {self.version}")
                    )
                    continue
                self.changes.append(committed)
                self.by_file.setdefault(committed.file, []).append(committed)

    def committed(self, txn: int) -> list[Change]:
        """The changes of a committed transaction (empty when it is not committed)."""
        with self._guard:
            found = []
            for change in reversed(self.changes):
                if change.version < txn:
                    break
                if change.txn == txn:
                    found.append(change)
            return found[::-1]

    def next_version(self) -> int:
        """The version the next change gets (never one seen before, committed or not)."""
        with self._guard:
            return max(self.max_seen, self.version) + 1

    def query(self, file: str = "", limit: int = 0) -> list[Change]:
        """Committed changes, newest first, of one file ("" = all); limit 0 = all."""
        with self._guard:
            source: Sequence[Change] = self.by_file.get(file, []) if file else self.changes
            newest = list(reversed(source))
            return newest[:limit] if limit > 0 else newest

    def state_at(self, file: str, version: int) -> tuple[bool, str | None]:
        """(known, sha) of `file` at `version`: sha None = the file did not exist.

        known is False for a file the journal never touched (its past is unknown).
        """
        with self._guard:
            changes = self.by_file.get(file)
            if not changes:
                return False, None
            last = None
            for change in changes:
                if change.version > version:
                    break
                last = change
            return True, (last.after if last is not None else changes[0].before)

    # -- writing (under the store's write lock) ------------------------------------
    def append(self, changes: Sequence[Change]) -> None:
        """Append a transaction's lines in one write and fsync; then read them back.

        Only the holder of the store's write lock appends; readers refreshing meanwhile
        see the new lines once a whole transaction is there.
        """
        payload = "".join(change_to_json(c) + "\n" for c in changes).encode("utf-8")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                payload = b"\n" + payload  # never glue a change onto a foreign partial line
            write_all(fd, payload)
        finally:
            os.close(fd)
        if size == 0:
            fsync_dir(self.root)
        self.refresh()

    def truncate(self, size: int) -> None:
        """Cut the journal back to `size` bytes (the torn tail of a dead writer)."""
        with self._guard:
            with contextlib.suppress(FileNotFoundError):
                if self.path.stat().st_size > size:
                    os.truncate(self.path, size)
                    fd = os.open(self.path, os.O_WRONLY)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            self._reset()
            self.refresh()

    # -- snapshots -------------------------------------------------------------------
    def snapshot_path(self, sha: str) -> Path:
        return self.history / f"{sha}.md"

    def save_snapshots(self, contents: Iterable[bytes]) -> None:
        """Store each content under history/<sha256>.md (fsync'd; existing ones are kept)."""
        self.history.mkdir(exist_ok=True)
        wrote = False
        for data in contents:
            path = self.snapshot_path(sha256(data))
            if not path.exists():
                atomic_write(path, data, sync_dir=False)
                wrote = True
        if wrote:
            fsync_dir(self.history)

    def snapshot(self, sha: str) -> bytes:
        """The content with this hash; HistoryError when it is missing or damaged."""
        path = self.snapshot_path(sha)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise HistoryError(f"{HISTORY_DIR}/{path.name}: snapshot missing") from None
        if sha256(data) != sha:
            raise HistoryError(f"{HISTORY_DIR}/{path.name}: snapshot damaged (hash mismatch)")
        return data
