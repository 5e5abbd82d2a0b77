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
    rewritten by a normal write (STATUS_READ_ONLY). The message names the file, lists each
    problem as `file:line: reason` and the command that repairs it."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        file = self.problems[0].file if self.problems else "?"
        shown = "; ".join(str(p) for p in self.problems[:5])
        more = f" (+{len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        count = f"{len(self.problems)} problem" + ("" if len(self.problems) == 1 else "s")
        super().__init__(
            f"{file} is read-only until it is repaired ({count}; those lines are left out of what is served): "
            f"{shown}{more}. {repair_hint(file)}"
        )


def repair_hint(file: str) -> str:
    """What to run to make a read-only memory file (relative to the memory folder) writable."""
    folder, _, name = file.rpartition("/")
    which = "--all"
    if file == "scene.md":
        which = "--scene"
    elif folder == "users" and name.endswith(".md"):
        which = f"--user {name.removesuffix('.md')}"
    return (
        f"Run `carryon memory repair {which}` to fix it without losing a line (`--dry-run` first shows what "
        "it would change), or fix those lines by hand"
    )


class RepairError(MemoryStoreError):
    """A repair would not leave a file that parses with no problems; nothing was written."""


class LockTimeout(MemoryStoreError):
    """Another writer held the memory lock longer than `lock_timeout_s` (STATUS_UNAVAILABLE)."""


class HistoryError(MemoryStoreError):
    """A snapshot needed to restore or roll forward is missing or does not match its hash."""


class SeedError(MemoryStoreError):
    """The seed folder cannot be used (missing, unreadable, or a seed file does not parse)."""
