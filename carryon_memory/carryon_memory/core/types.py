"""Memory facts and scene entries as plain data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fact:
    """`- key: value` in the section block of `entity` in a user's Markdown file.

    durable=False marks a temporary wish: kept in the request's context, never persisted.
    """

    entity: str
    key: str
    value: str
    durable: bool = True
    source: str = ""


@dataclass(frozen=True)
class Location:
    """What scene memory says is at a named location, and when/how it was observed.

    observed_s: observation time, seconds since the epoch (0.0 = never observed).
    """

    name: str
    contents: tuple[str, ...]
    observed_s: float = 0.0
    source: str = ""
