"""Layout of a memory folder and its parsed files.

Layout of the memory folder::

    users/<user_id>.md     one file per user: `## entity` blocks of `- key: value` facts
    scene.md               shared scene memory: `## location` blocks (see core/scene.py)
    images/<user_id>/...   remembered reference images (the fact value is their path)
    journal.jsonl          every change: what, when, source, previous value (core/journal.py)
    history/<sha256>.md    every file content a change produced or replaced
    .lock                  cross-process write lock + marker of the transaction in flight

Files with malformed lines (see core/markdown.py) are served as far as they parse but
never rewritten by a normal write: `writable` raises `ReadOnly` naming `file:line: reason`,
until `carryon memory repair` (core/repair.py) or a person fixes the file.

`ParsedFiles` is the readers' cache of parsed files: reads take no lock, because files are
only ever replaced atomically, so a reader sees a whole old or a whole new file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from carryon_common.core.durable import read_bytes
from carryon_common.core.names import MEMORY_IMAGES_DIR
from carryon_memory.core import validate
from carryon_memory.core.errors import ReadOnly
from carryon_memory.core.markdown import SectionDoc
from carryon_memory.core.scene import SCENE_FILE, locations
from carryon_memory.core.types import Fact, Location, Problem

USERS_DIR = "users"
IMAGES_DIR = MEMORY_IMAGES_DIR  # "images": memory/changed consumers tell image facts by it


def user_file(user_id: str) -> str:
    """Path of a user's memory file relative to the memory folder."""
    return f"{USERS_DIR}/{user_id}.md"


def user_title(user_id: str) -> str:
    return f"User memory: {user_id}"


@dataclass(frozen=True)
class Loaded:
    """A parsed memory file: its problems and what it serves (facts or locations)."""

    doc: SectionDoc
    problems: tuple[Problem, ...]
    facts: tuple[Fact, ...] = ()
    locations: tuple[Location, ...] = ()


def load_user_doc(doc: SectionDoc) -> Loaded:
    problems = list(doc.problems)
    facts = []
    for section in doc.sections.values():
        for entry in section.entries.values():
            if not entry.value:
                problems.append(Problem(doc.file, entry.line + 1, f"{entry.key!r} has no value (add one or delete it)"))
                continue
            facts.append(Fact(section.name, entry.key, entry.value))
    return Loaded(doc, tuple(sorted(problems, key=lambda p: p.line)), facts=tuple(facts))


def load_scene_doc(doc: SectionDoc) -> Loaded:
    found, problems = locations(doc)
    every = sorted([*doc.problems, *problems], key=lambda p: p.line)
    return Loaded(doc, tuple(every), locations=tuple(found))


def load_file(rel: str, data: bytes) -> Loaded:
    """Parse the bytes of the memory file `rel` (scene.md or users/<user_id>.md)."""
    doc = SectionDoc.from_bytes(data, rel)
    return load_scene_doc(doc) if rel == SCENE_FILE else load_user_doc(doc)


def writable(rel: str, data: bytes | None) -> Loaded | None:
    """The parsed file (None when it does not exist), or ReadOnly when it has problems
    (it is never rewritten then)."""
    if data is None:
        return None
    loaded = load_file(rel, data)
    if loaded.problems:
        raise ReadOnly(loaded.problems)
    return loaded


def valid_file(rel: str) -> bool:
    """Whether a journal path is one the store manages (never trust a path read from disk)."""
    if rel == SCENE_FILE:
        return True
    folder, _, name = rel.partition("/")
    return folder == USERS_DIR and name.endswith(".md") and validate.USER_ID.fullmatch(name[:-3]) is not None


class ParsedFiles:
    """The parsed memory files of the folder `root`, each kept until it changes on disk.

    A file is read again when its inode, size or times change (the store replaces files by
    rename; a hand edit in place changes the size or the modification time), so hand edits
    are picked up at the next read, without a restart. A cached file is returned as the same
    object while it is unchanged: callers keep what they derive from it by identity.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._users_dir = root / USERS_DIR
        self._cache: dict[str, tuple[tuple[int, ...], Loaded]] = {}

    def load(self, rel: str) -> Loaded | None:
        """The parsed file `rel` (relative to the folder); None when it does not exist."""
        path = self.root / rel
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        return self._parsed(rel, stat)

    def users(self) -> list[str]:
        """Ids of the users that have a memory file, sorted."""
        return [user for user, _entry in self._user_entries()]

    def user_files(self) -> list[tuple[str, Loaded | None]]:
        """(user id, parsed file) of every user that has a memory file, sorted by id; None for
        a file that disappeared while it was listed. Costs one listing and one `stat` per user
        (GetContext asks for it on every request), reading only the files that changed."""
        found: list[tuple[str, Loaded | None]] = []
        for user, entry in self._user_entries():
            try:
                stat = entry.stat()
            except FileNotFoundError:
                found.append((user, None))
                continue
            found.append((user, self._parsed(user_file(user), stat)))
        return found

    def _user_entries(self) -> list[tuple[str, os.DirEntry[str]]]:
        try:
            with os.scandir(self._users_dir) as entries:
                named = [(entry.name[:-3], entry) for entry in entries if entry.name.endswith(".md")]
        except (FileNotFoundError, NotADirectoryError):  # users/ removed by hand: nobody has a file
            return []
        return sorted(((u, e) for u, e in named if validate.USER_ID.fullmatch(u)), key=lambda pair: pair[0])

    def _parsed(self, rel: str, stat: os.stat_result) -> Loaded | None:
        signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        cached = self._cache.get(rel)
        if cached is not None and cached[0] == signature:
            return cached[1]
        data = read_bytes(self.root / rel)
        if data is None:
            return None
        loaded = load_file(rel, data)
        self._cache[rel] = (signature, loaded)
        return loaded
