"""Errors of the memory store. memory_node maps each to a service STATUS_* code."""

from __future__ import annotations

from collections.abc import Sequence

from carryon_common.core.errors import CarryOnError
from carryon_memory.core.types import Problem


class MemoryStoreError(CarryOnError):
    """Base class of every error the memory store raises on purpose."""


class InvalidArgument(MemoryStoreError):
    """A user id, entity, key, value, location, item or image is not acceptable (STATUS_INVALID_ARGUMENT)."""


class NotFound(MemoryStoreError):
    """The fact, item, file or version asked for does not exist (STATUS_NOT_FOUND)."""


class ReadOnly(MemoryStoreError):
    """The target file has malformed lines: it is served as far as it parses but never
    rewritten until a person fixes it (STATUS_READ_ONLY). The message lists each problem
    as `file:line: reason`."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        first = self.problems[0].file if self.problems else "?"
        shown = "; ".join(str(p) for p in self.problems[:5])
        more = f" (+{len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        super().__init__(f"{first} is read-only until it is fixed by hand: {shown}{more}")


class LockTimeout(MemoryStoreError):
    """Another writer held the memory lock longer than `lock_timeout_s` (STATUS_UNAVAILABLE)."""


class HistoryError(MemoryStoreError):
    """A snapshot needed to restore or roll forward is missing or does not match its hash."""


class SeedError(MemoryStoreError):
    """The seed folder cannot be used (missing, unreadable, or a seed file does not parse)."""
