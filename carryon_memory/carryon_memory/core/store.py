"""`MemoryStore`: persistent user and scene memory as Markdown files, with a journal.

Layout of the memory folder::

    users/<user_id>.md     one file per user: `## entity` blocks of `- key: value` facts
    scene.md               shared scene memory: `## location` blocks (see core/scene.py)
    images/<user_id>/...   remembered reference images (the fact value is their path)
    journal.jsonl          every change: what, when, source, previous value (core/journal.py)
    history/<sha256>.md    every file content a change produced or replaced
    .lock                  cross-process write lock + marker of the transaction in flight

Reads take no lock: files are only ever replaced atomically, so a reader sees a whole
old or a whole new file. Parsed files are cached and re-read when their inode, size or
times change, so hand edits are picked up without a restart.

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

Files with malformed lines (see core/markdown.py) are served as far as they parse but
never rewritten: writes to them raise `ReadOnly` naming `file:line: reason`, until a
person fixes the file. Other users are not affected.

Time is an input: every write takes `now` (seconds since the epoch, wall clock) for the
journal and for observations without a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from carryon_memory.core import validate
from carryon_memory.core.durable import TEMP_MARK, WriteLock, atomic_write, fsync_dir, read_bytes
from carryon_memory.core.errors import InvalidArgument, NotFound, ReadOnly, SeedError
from carryon_memory.core.images import check_image
from carryon_memory.core.journal import HISTORY_DIR, JOURNAL_FILE, Journal, sha256
from carryon_memory.core.markdown import SectionDoc, fold
from carryon_memory.core.render import estimate_tokens, ordered_facts, render_context
from carryon_memory.core.scene import SCENE_FILE, SCENE_TITLE, apply_update, check_update, locations, write_location
from carryon_memory.core.scene import join_contents as _join
from carryon_memory.core.types import Change, Context, Fact, Location, Problem, SceneOp, SceneUpdate

USERS_DIR = "users"
IMAGES_DIR = "images"
LOCK_FILE = ".lock"
_SCENE_OPS = {SceneOp.SET_CONTENTS: "scene_set", SceneOp.MOVE_ITEM: "scene_move", SceneOp.REMOVE_ITEM: "scene_remove"}
_SLUG = re.compile(r"[^a-z0-9_-]+")
_MAX_MEMOS = 1024  # remembered contexts (one per user id asked for); cleared when full


def user_file(user_id: str) -> str:
    """Path of a user's memory file relative to the memory folder."""
    return f"{USERS_DIR}/{user_id}.md"


def user_title(user_id: str) -> str:
    return f"User memory: {user_id}"


def _slug(name: str) -> str:
    return _SLUG.sub("-", name.lower()).strip("-")[:40] or "x"


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


def _load(rel: str, data: bytes) -> Loaded:
    doc = SectionDoc.from_bytes(data, rel)
    return load_scene_doc(doc) if rel == SCENE_FILE else load_user_doc(doc)


def _valid_file(rel: str) -> bool:
    """Whether a journal path is one the store manages (never trust a path read from disk)."""
    if rel == SCENE_FILE:
        return True
    folder, _, name = rel.partition("/")
    return folder == USERS_DIR and name.endswith(".md") and validate.USER_ID.fullmatch(name[:-3]) is not None


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


class _Transaction:
    """The changes of one write, staged in memory until `commit`."""

    def __init__(self, store: MemoryStore, lock_fd: int) -> None:
        self._store = store
        self._fd = lock_fd
        self._current: dict[str, bytes | None] = {}
        self._steps: list[_Step] = []

    def read(self, rel: str) -> bytes | None:
        """The file's bytes as of this transaction (re-read from disk, never from a cache)."""
        if rel not in self._current:
            self._current[rel] = read_bytes(self._store.root / rel)
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

    def commit(self, now: float) -> list[Change]:
        """Write the staged changes durably (see the module docstring for the order)."""
        if not self._steps:
            return []
        journal = self._store.journal
        first = journal.next_version()
        changes = []
        for index, step in enumerate(self._steps):
            changes.append(
                Change(
                    version=first + index, txn=first, txn_size=len(self._steps), time_s=now, file=step.file,
                    op=step.op, entity=step.entity, key=step.key, previous_value=step.previous, new_value=step.new,
                    source=step.source,
                    before=sha256(step.before) if step.before is not None else None,
                    after=sha256(step.after) if step.after is not None else None,
                )
            )  # fmt: skip
        contents = {data for step in self._steps for data in (step.before, step.after) if data is not None}
        journal.save_snapshots(sorted(contents))
        size = journal.path.stat().st_size if journal.path.exists() else 0
        _write_marker(self._fd, json.dumps({"txn": first, "journal_size": size}).encode())
        journal.append(changes)
        folders = set()
        for rel in dict.fromkeys(step.file for step in self._steps):
            self._store.put(rel, self._current[rel])
            folders.add((self._store.root / rel).parent)
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


class MemoryStore:
    """User and scene memory in `root` (created when missing).

    lock_timeout_s: longest wait for the write lock, seconds. max_value_chars: longest
    fact value accepted. max_image_bytes: largest reference image accepted. Opening a
    store finishes a transaction a killed writer left behind (taking the write lock).
    """

    def __init__(
        self,
        root: Path,
        *,
        lock_timeout_s: float = 5.0,
        max_value_chars: int = 2000,
        max_image_bytes: int = 5_000_000,
    ) -> None:
        self.root = Path(root).expanduser().resolve()
        for folder in (self.root, self.root / USERS_DIR, self.root / IMAGES_DIR, self.root / HISTORY_DIR):
            folder.mkdir(parents=True, exist_ok=True)
        self.max_value_chars = max_value_chars
        self.max_image_bytes = max_image_bytes
        self.journal = Journal(self.root)
        self._lock = WriteLock(self.root / LOCK_FILE, lock_timeout_s)
        self._cache: dict[str, tuple[tuple[int, ...], Loaded]] = {}
        # user_id -> (user file, scene file, version, context) of the last plain request.
        self._contexts: dict[str, tuple[Loaded | None, Loaded | None, int, Context]] = {}
        self.recovered: list[str] = []  # what opening (or a later write) repaired, for the log
        with self._lock.hold() as fd:
            self._recover(fd, sweep=True)

    # -- files ------------------------------------------------------------------------
    def load(self, rel: str) -> Loaded | None:
        """A parsed memory file (cached by inode, size and times); None when it does not exist."""
        path = self.root / rel
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        cached = self._cache.get(rel)
        if cached is not None and cached[0] == signature:
            return cached[1]
        data = read_bytes(path)
        if data is None:
            return None
        loaded = _load(rel, data)
        self._cache[rel] = (signature, loaded)
        return loaded

    def put(self, rel: str, data: bytes | None) -> None:
        """Replace (or delete, for None) one file atomically; the caller holds the lock."""
        path = self.root / rel
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data, sync_dir=False)

    def users(self) -> list[str]:
        """Ids of the users that have a memory file, sorted."""
        return sorted(p.stem for p in (self.root / USERS_DIR).glob("*.md") if validate.USER_ID.fullmatch(p.stem))

    def version(self) -> int:
        """The store version (last committed change), read from the journal."""
        self.journal.refresh()
        return self.journal.version

    def problems(self) -> list[Problem]:
        """Every problem of every memory file and the journal (for health reports)."""
        found: list[Problem] = []
        for path in sorted((self.root / USERS_DIR).iterdir()):
            rel = f"{USERS_DIR}/{path.name}"
            if path.name.startswith(".") or path.is_dir():
                continue
            if path.suffix != ".md" or not validate.USER_ID.fullmatch(path.stem):
                found.append(Problem(rel, 0, "not named <user_id>.md with a valid user id; ignored"))
                continue
            loaded = self.load(rel)
            found.extend(loaded.problems if loaded else ())
        scene = self.load(SCENE_FILE)
        found.extend(scene.problems if scene else ())
        self.journal.refresh()
        found.extend(self.journal.problems)
        return found

    # -- reading -------------------------------------------------------------------
    def context(self, user_id: str, temporary: Sequence[Fact] = ()) -> Context:
        """The planner context of `user_id` ("" = scene memory only) with the request's
        temporary facts merged in (never stored). An unknown user gets an empty block."""
        if user_id:
            validate.user_id(user_id)
        extra = tuple(self._check_temporary(temporary))
        version = self.version()
        user = self.load(user_file(user_id)) if user_id else None
        scene = self.load(SCENE_FILE)
        if not extra:  # files unchanged since the last request (same parsed objects): same answer
            memo = self._contexts.get(user_id)
            if memo is not None and memo[0] is user and memo[1] is scene and memo[2] == version:
                return memo[3]
        problems = (*(user.problems if user else ()), *(scene.problems if scene else ()))
        note = ""
        if user is not None and user.problems:
            note = f"{len(user.problems)} malformed line(s) of {user_file(user_id)} left out; the file is read-only"
        facts = tuple(ordered_facts(user.facts)) if user else ()
        places = scene.locations if scene else ()
        rendered = render_context(user_id, facts, extra, places, known_user=user is not None, note=note)
        context = Context(
            user_id=user_id, known_user=user is not None, facts=facts, temporary=extra, scene=places,
            rendered=rendered, version=version, chars=len(rendered), tokens=estimate_tokens(rendered),
            problems=problems,
        )  # fmt: skip
        if not extra:
            if len(self._contexts) >= _MAX_MEMOS:
                self._contexts.clear()
            self._contexts[user_id] = (user, scene, version, context)
        return context

    def _check_temporary(self, facts: Sequence[Fact]) -> Iterator[Fact]:
        for index, fact in enumerate(facts):
            where = f"temporary_facts[{index}]"
            if fact.durable:
                raise InvalidArgument(
                    f"{where} ({fact.entity}.{fact.key}) has durable=true: durable facts are stored with "
                    "memory/update_user, the context takes temporary ones only"
                )
            try:
                value = validate.value(fact.value, self.max_value_chars)
                if not value:
                    raise InvalidArgument("value is empty")
                yield Fact(validate.entity(fact.entity), validate.key(fact.key), value, False, fact.source)
            except InvalidArgument as exc:
                raise InvalidArgument(f"{where}: {exc}") from None

    def history(self, file: str = "", limit: int = 0) -> list[Change]:
        """Committed changes, newest first, of one file ("" = all), at most `limit` (0 = all)."""
        if file and not _valid_file(file):
            raise InvalidArgument(f"file {file!r}: expected 'scene.md' or 'users/<user_id>.md'")
        if limit < 0:
            raise InvalidArgument(f"limit {limit}: must be >= 0")
        self.journal.refresh()
        return self.journal.query(file, limit)

    # -- writing ------------------------------------------------------------------
    @contextlib.contextmanager
    def _transaction(self) -> Iterator[_Transaction]:
        with self._lock.hold() as fd:
            self._recover(fd)
            self.journal.refresh()
            yield _Transaction(self, fd)

    def _writable(self, rel: str, data: bytes | None) -> Loaded | None:
        """The parsed file, or ReadOnly when it has problems (it is never rewritten then)."""
        if data is None:
            return None
        loaded = _load(rel, data)
        if loaded.problems:
            raise ReadOnly(loaded.problems)
        return loaded

    def update_user(self, user_id: str, facts: Sequence[Fact], source: str, now: float) -> list[Change]:
        """Apply durable facts to a user's memory, in order; all or nothing.

        A fact replaces the value of the same entity + key (the old one stays in the
        journal); an empty value removes the fact (NotFound when there is none). A
        temporary fact (durable=False) is refused: temporary wishes are never stored.
        Returns the journal entries written (empty when nothing changed).
        """
        validate.user_id(user_id)
        source = validate.source(source)
        if not facts:
            raise InvalidArgument("no facts given")
        checked = []
        for index, fact in enumerate(facts):
            where = f"facts[{index}]"
            if not fact.durable:
                raise InvalidArgument(
                    f"{where} ({fact.entity}.{fact.key}) is temporary (durable=false): temporary wishes stay in "
                    "the request's context (GetContext.temporary_facts) and are never stored; nothing was changed"
                )
            try:
                entity, key = validate.entity(fact.entity), validate.key(fact.key)
                checked.append((index, entity, key, validate.value(fact.value, self.max_value_chars)))
            except InvalidArgument as exc:
                raise InvalidArgument(f"{where}: {exc}") from None
        rel = user_file(user_id)
        with self._transaction() as txn:
            loaded = self._writable(rel, txn.read(rel))
            doc = loaded.doc if loaded else SectionDoc("", rel)
            doc.set_title_if_new(user_title(user_id))
            for index, entity, key, value in checked:
                previous = doc.get(entity, key)
                if not value:
                    if previous is None:
                        raise NotFound(f"facts[{index}]: user {user_id!r} has no fact {entity}.{key} to remove")
                    doc.remove(entity, key)
                    txn.record(
                        rel, "remove", entity=entity, key=key, previous=previous, source=source, after=doc.to_bytes()
                    )
                elif previous != value:
                    doc.set(entity, key, value)
                    txn.record(
                        rel, "set", entity=entity, key=key, previous=previous or "", new=value, source=source,
                        after=doc.to_bytes(),
                    )  # fmt: skip
            return txn.commit(now)

    def remember_image(
        self, user_id: str, *, entity: str, key: str, image_format: str, data: bytes, source: str, now: float
    ) -> tuple[str, list[Change]]:
        """Store a reference image and record its path as the fact `entity.key` of the user.

        The file is images/<user>/<entity>-<key>-<hash>.<ext> (content-named: an older
        image of the same fact stays, so restoring an older version still finds it).
        Returns (path relative to the memory folder, journal entries).
        """
        validate.user_id(user_id)
        entity, key, source = validate.entity(entity), validate.key(key), validate.source(source)
        extension = check_image(image_format, data, self.max_image_bytes)
        image_rel = f"{IMAGES_DIR}/{user_id}/{_slug(entity)}-{_slug(key)}-{sha256(data)[:12]}.{extension}"
        if len(image_rel) > self.max_value_chars:
            raise InvalidArgument(f"image path {image_rel!r} is longer than max_value_chars={self.max_value_chars}")
        rel = user_file(user_id)
        with self._transaction() as txn:
            loaded = self._writable(rel, txn.read(rel))
            image_path = self.root / image_rel
            if not image_path.exists():
                image_path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(image_path, data)
            doc = loaded.doc if loaded else SectionDoc("", rel)
            doc.set_title_if_new(user_title(user_id))
            previous = doc.get(entity, key)
            if previous != image_rel:
                doc.set(entity, key, image_rel)
                txn.record(
                    rel, "image", entity=entity, key=key, previous=previous or "", new=image_rel, source=source,
                    after=doc.to_bytes(),
                )  # fmt: skip
            return image_rel, txn.commit(now)

    def update_scene(self, updates: Sequence[SceneUpdate], now: float) -> list[Change]:
        """Apply observation-driven updates to scene memory, in order; all or nothing.

        One journal entry per location whose contents changed (entity = location, key =
        "contents"); the observed location records the observation time and source.
        """
        if not updates:
            raise InvalidArgument("no updates given")
        checked = [check_update(update, index) for index, update in enumerate(updates)]
        with self._transaction() as txn:
            loaded = self._writable(SCENE_FILE, txn.read(SCENE_FILE))
            doc = loaded.doc if loaded else SectionDoc("", SCENE_FILE)
            doc.set_title_if_new(SCENE_TITLE)
            current = {fold(loc.name): loc for loc in (loaded.locations if loaded else ())}
            for index, update in enumerate(checked):
                try:
                    changed = apply_update(current, update, now)
                except NotFound as exc:
                    raise NotFound(f"updates[{index}]: {exc}") from None
                for before, after in changed:
                    write_location(doc, after)
                    previous = _join(before.contents) if before else ""
                    txn.record(
                        SCENE_FILE, _SCENE_OPS[update.op], entity=after.name, key="contents", previous=previous,
                        new=_join(after.contents), source=update.source, after=doc.to_bytes(),
                    )  # fmt: skip
            return txn.commit(now)

    def restore(self, version: int, now: float) -> list[Change]:
        """Bring every file the journal knows back to its content at `version`; recorded
        as new changes (op "restore", source "restore:<version>"), so it can be undone.

        NotFound for a version that does not exist; ReadOnly when a file to be replaced
        has malformed lines (fix it or move it away first: it is never overwritten).
        Returns the entries written (empty when the files already match).
        """
        with self._transaction() as txn:
            newest = self.journal.version
            if not 1 <= version <= newest:
                span = f"1..{newest}" if newest else "none yet"
                raise NotFound(f"version {version} does not exist (versions: {span})")
            for rel in sorted(self.journal.by_file):
                if not _valid_file(rel):
                    continue
                _known, sha = self.journal.state_at(rel, version)
                target = None if sha is None else self.journal.snapshot(sha)
                current = txn.read(rel)
                if current == target:
                    continue
                self._writable(rel, current)
                txn.record(rel, "restore", source=f"restore:{version}", after=target)
            return txn.commit(now)

    def seed_from(self, seed_dir: Path, now: float) -> list[Change]:
        """Copy `seed_dir`'s scene.md and users/*.md into a new, empty store (journaled as
        op "seed"). Does nothing when the store has any memory file or journal entry:
        seed data is for the first start only and never replaces anything."""
        seed_dir = Path(seed_dir)
        if not seed_dir.is_dir():
            raise SeedError(f"seed_dir {seed_dir}: not a folder")
        with self._transaction() as txn:
            if self.journal.changes or (self.root / SCENE_FILE).exists() or self.users():
                return []
            sources = []
            if (seed_dir / SCENE_FILE).is_file():
                sources.append(SCENE_FILE)
            for path in sorted((seed_dir / USERS_DIR).glob("*.md")):
                if not validate.USER_ID.fullmatch(path.stem):
                    raise SeedError(f"{path}: file name is not a valid user id")
                sources.append(user_file(path.stem))
            for rel in sources:
                try:
                    data = (seed_dir / rel).read_bytes()
                except OSError as exc:
                    raise SeedError(f"{seed_dir / rel}: cannot read: {exc.strerror}") from None
                problems = _load(rel, data).problems
                if problems:
                    raise SeedError("; ".join(f"{seed_dir}/{p}" for p in problems))
                txn.record(rel, "seed", source=f"seed:{seed_dir.name}", after=data)
            return txn.commit(now)

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
                        if not _valid_file(rel):
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


__all__ = ["JOURNAL_FILE", "LOCK_FILE", "SCENE_FILE", "MemoryStore", "user_file"]
