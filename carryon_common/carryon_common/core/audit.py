"""The audit log: every decision (plan, validation result, shield block, verdict, recovery,
memory change) appended to a tamper-evident, hash-chained JSONL file.

Each line is one JSON object:

    {"seq": 7, "time": "2026-11-30T14:00:00.123456Z", "kind": "shield.block",
     "source": "shield_node", "data": {...}, "prev": "<sha256 of line 6>", "hash": "<sha256>"}

`hash` is the SHA-256 of the line's canonical JSON without `hash` (sorted keys, no spaces),
which includes `prev`, the previous line's hash (64 zeros for the first). Changing,
removing, reordering or inserting a line breaks the chain at that line; `verify` names it.
Cutting lines off the end leaves a valid shorter chain: that is caught only against a
last hash recorded elsewhere (`verify(path, expect_last=...)`, e.g. from a run's report).

Keyed (issue 19): with a key, each entry also carries `mac`, the HMAC-SHA256 of its hash
under a key kept outside the run folder (`DEFAULT_KEY_FILE`, made on first use). Anyone
can recompute a consistent SHA-256 chain after removing lines; without the key they cannot
recompute the MACs, so `verify(path, key=...)` finds the first rewritten line.
Appends are single `write` calls on an O_APPEND file descriptor with fsync, so concurrent
writers in one process never interleave lines and a crash leaves at most a torn last line,
which `verify` reports (and `AuditLog` refuses to append after, rather than chain onto it).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from carryon_common.core.errors import CarryOnError

GENESIS = "0" * 64
DEFAULT_KEY_FILE = "~/.local/state/carryon/audit.key"  # outside every run folder


def _mac(key: bytes, digest: str) -> str:
    return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


class AuditError(CarryOnError):
    """The audit log cannot be appended to (its tail is broken) or read."""


def _digest(entry: Mapping[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k not in ("hash", "mac")}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Verification:
    ok: bool
    entries: int  # lines that verified
    problem: str = ""  # the first broken line and why ("" when ok)
    last_hash: str = GENESIS
    keyed: bool = False  # every entry's MAC was checked against the key


def verify(path: Path, expect_last: str = "", key: bytes | None = None) -> Verification:
    """Check every line's hash and link; stops at the first problem. With `expect_last`
    the chain must also end at that hash (detects lines cut off the end). With `key`, every
    entry's MAC must verify (detects a chain recomputed without the key)."""
    prev, seq = GENESIS, 0
    if not path.exists():
        return Verification(False, 0, f"{path}: no such file")
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                entry = json.loads(raw)
            except ValueError:
                return Verification(False, seq, f"line {number}: not JSON (torn or edited)", prev)
            if not isinstance(entry, dict) or not {"seq", "prev", "hash"} <= set(entry):
                return Verification(False, seq, f"line {number}: not an audit entry", prev)
            if entry["prev"] != prev:
                return Verification(
                    False,
                    seq,
                    f"line {number}: does not follow line {number - 1} (removed, inserted or reordered lines)",
                    prev,
                )
            if entry["seq"] != seq + 1:
                return Verification(False, seq, f"line {number}: sequence {entry['seq']}, expected {seq + 1}", prev)
            if _digest(entry) != entry["hash"]:
                return Verification(False, seq, f"line {number}: content changed (hash mismatch)", prev)
            if key is not None and not hmac.compare_digest(
                str(entry.get("mac", "")).encode("utf-8", "surrogatepass"), _mac(key, entry["hash"]).encode()
            ):
                why = "no MAC" if "mac" not in entry else "MAC mismatch"
                return Verification(False, seq, f"line {number}: {why} (rewritten without the audit key?)", prev)
            prev, seq = entry["hash"], entry["seq"]
    if expect_last and prev != expect_last:
        return Verification(
            False,
            seq,
            f"the chain ends at entry {seq} with {prev[:12]}..., not at the expected "
            f"{expect_last[:12]}... (lines cut off the end?)",
            prev,
        )
    return Verification(True, seq, "", prev, keyed=key is not None)


class AuditLog:
    """Appends entries to `path` (created with its folder), each with a MAC when `key` is
    given. Opening an existing log verifies it first: a log whose chain is broken is not
    appended to (AuditError names the line)."""

    def __init__(self, path: Path, key: bytes | None = None) -> None:
        self.path = Path(path)
        self.key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        if self.path.exists() and self.path.stat().st_size:
            check = verify(self.path, key=key)
            if not check.ok:
                raise AuditError(f"{self.path}: {check.problem}; not appending to a broken chain")
            self._prev, self._seq = check.last_hash, check.entries
        else:
            self._prev, self._seq = GENESIS, 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, kind: str, source: str, data: Mapping[str, Any]) -> dict[str, Any]:
        """Append one decision; returns the entry written (with its hash)."""
        with self._lock:
            entry: dict[str, Any] = {
                "seq": self._seq + 1,
                "time": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "kind": kind,
                "source": source,
                "data": dict(data),
                "prev": self._prev,
            }
            entry["hash"] = _digest(entry)
            if self.key is not None:
                entry["mac"] = _mac(self.key, entry["hash"])
            line = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            os.write(self._fd, (line + "\n").encode("utf-8"))
            os.fsync(self._fd)
            self._prev, self._seq = entry["hash"], entry["seq"]
            return entry

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
