"""Registries of named things (backends, benchmarks) with helpful errors on typos."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

from carryon_common.core.errors import UnknownNameError

T = TypeVar("T")


def unknown_name_message(kind: str, name: str, valid: Iterable[str]) -> str:
    """Message for an unknown `name` of some `kind`, listing the valid names and the closest one."""
    valid = sorted(valid)
    message = f"unknown {kind} {name!r}; valid: {', '.join(valid) if valid else '(none)'}"
    close = difflib.get_close_matches(name, valid, n=1, cutoff=0.6)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


class Registry(Generic[T]):
    """Maps names to entries (factories, classes, specs); lookups of unknown names raise
    `UnknownNameError` listing the valid names and suggesting the closest one."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(unknown_name_message(self.kind, name, self._entries)) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
