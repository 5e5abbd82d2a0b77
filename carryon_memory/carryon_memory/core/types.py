"""Memory facts, scene entries, journal entries and rendered contexts as plain data."""

from __future__ import annotations

import enum
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


class SceneOp(enum.IntEnum):
    """Mirrors SceneUpdate.OP_* of carryon_interfaces."""

    SET_CONTENTS = 0  # replace the location's contents
    MOVE_ITEM = 1  # take the item from wherever it is, put it at `location`
    REMOVE_ITEM = 2  # the item is no longer anywhere known


@dataclass(frozen=True)
class SceneUpdate:
    """One observation-driven change to scene memory.

    observed_s: when the observation was made, seconds (node clock; 0.0 = use the time
    of the update).
    """

    op: SceneOp
    location: str = ""
    contents: tuple[str, ...] = ()
    item: str = ""
    observed_s: float = 0.0
    source: str = ""


@dataclass(frozen=True)
class Problem:
    """A malformed line (or file) found while parsing; `str()` is `file:line: reason`.

    file is relative to the memory directory; line is 1-based (0 = the whole file).
    """

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}" if self.line else f"{self.file}: {self.reason}"


@dataclass(frozen=True)
class Change:
    """One journal entry: a change to one file, with what it replaced.

    version: store version after this change (monotonic, gap-free over committed
    changes). txn / txn_size: the first version of the transaction this change belongs
    to and how many changes it has (a transaction is committed only when all its lines
    are in the journal). time_s: wall clock, seconds since the epoch. before / after:
    sha256 of the whole file before / after this change (None = the file did not
    exist); the contents are kept under `history/<sha256>.md` so any version can be
    restored. op: set, remove, image, scene_set, scene_move, scene_remove, restore, seed,
    repair (core/repair.py).
    """

    version: int
    txn: int
    txn_size: int
    time_s: float
    file: str
    op: str
    entity: str
    key: str
    previous_value: str
    new_value: str
    source: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class Context:
    """What the planner gets for one request (GetContext).

    facts: the user's durable facts in rendering order; temporary: the request's
    temporary facts (never persisted). chars / tokens: size of `rendered` (tokens is an
    estimate, see `render.estimate_tokens`). problems: malformed lines of the files the
    context was read from (those lines are left out of it).
    """

    user_id: str
    known_user: bool
    facts: tuple[Fact, ...]
    temporary: tuple[Fact, ...]
    scene: tuple[Location, ...]
    rendered: str
    version: int
    chars: int
    tokens: int
    problems: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class StoredImage:
    """A remembered reference image as stored: the fact `entity.key` of `user_id` whose
    value is `path` (relative to the memory folder, images/<user_id>/...);
    `image_format` 'png' or 'jpeg' (from the file name); `data` the encoded file bytes,
    not decoded here (they were checked when remembered)."""

    user_id: str
    entity: str
    key: str
    path: str
    image_format: str
    data: bytes


@dataclass(frozen=True)
class StoredImages:
    """Every remembered image asked for (`MemoryStore.reference_images`): `images` ordered
    by user, then as the user's file lists them; `problems` the image facts left out (file
    missing, too large, not a path the store writes); `version` the store version the
    answer was read at (the images are at least that new)."""

    images: tuple[StoredImage, ...]
    problems: tuple[Problem, ...]
    version: int
