"""`MemoryStore`: persistent user and scene memory as Markdown files, with a journal.

The folder layout is in core/files.py. Reads take no lock: files are only ever replaced
atomically, so a reader sees a whole old or a whole new file. Parsed files are cached
and re-read when their inode, size or times change, so hand edits are picked up without
a restart (`ParsedFiles`); what is derived from them for GetContext (the rendered context
here, the other users' values in core/others.py) is kept until a file it was derived
from changes.

Writes are transactions (core/transaction.py): one at a time across processes, journaled,
finished or undone after a writer dies mid-commit. Seeding a new folder is core/seed.py.

Files with malformed lines (see core/markdown.py) are served as far as they parse but
never rewritten: writes to them raise `ReadOnly` naming `file:line: reason`, until a
person fixes the file. Other users are not affected.

Time is an input: every write takes `now` (seconds since the epoch, wall clock) for the
journal and for observations without a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from carryon_common.core.durable import atomic_write
from carryon_memory.core import validate
from carryon_memory.core.errors import InvalidArgument, NotFound
from carryon_memory.core.files import (
    IMAGES_DIR,
    USERS_DIR,
    Loaded,
    ParsedFiles,
    user_file,
    user_title,
    valid_file,
    writable,
)
from carryon_memory.core.images import check_image, stored_image
from carryon_memory.core.journal import HISTORY_DIR, Journal, sha256
from carryon_memory.core.markdown import SectionDoc, fold
from carryon_memory.core.others import OthersIndex
from carryon_memory.core.render import estimate_tokens, ordered_facts, render_context
from carryon_memory.core.scene import SCENE_FILE, SCENE_TITLE, apply_update, check_update, write_location
from carryon_memory.core.scene import join_contents as _join
from carryon_memory.core.transaction import Transaction, Writer
from carryon_memory.core.types import (
    Change,
    Context,
    Fact,
    Problem,
    SceneOp,
    SceneUpdate,
    StoredImage,
    StoredImages,
)

_SCENE_OPS = {SceneOp.SET_CONTENTS: "scene_set", SceneOp.MOVE_ITEM: "scene_move", SceneOp.REMOVE_ITEM: "scene_remove"}
_SLUG = re.compile(r"[^a-z0-9_-]+")
_MAX_MEMOS = 1024  # remembered contexts (one per user id asked for); cleared when full


def _slug(name: str) -> str:
    return _SLUG.sub("-", name.lower()).strip("-")[:40] or "x"


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
        self._writer = Writer(self.root, self.journal, lock_timeout_s)
        self.files = ParsedFiles(self.root)
        # GetContext's other users and their values, kept until a user file changes (core/others.py).
        self.others_index = OthersIndex()
        # user_id -> (user file, scene file, version, context) of the last plain request.
        self._contexts: dict[str, tuple[Loaded | None, Loaded | None, int, Context]] = {}

    @property
    def recovered(self) -> list[str]:
        """What opening (or a later write) repaired after a writer died mid-commit, for the log."""
        return self._writer.recovered

    # -- files ------------------------------------------------------------------------
    def load(self, rel: str) -> Loaded | None:
        """A parsed memory file (cached by inode, size and times); None when it does not exist."""
        return self.files.load(rel)

    def users(self) -> list[str]:
        """Ids of the users that have a memory file, sorted."""
        return self.files.users()

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
            if memo is not None and memo[0] is user and memo[1] is scene:
                if memo[2] != version:  # another file changed: the same context at the new version
                    memo = (user, scene, version, dataclasses.replace(memo[3], version=version))
                    self._contexts[user_id] = memo
                return memo[3]
        problems = (*(user.problems if user else ()), *(scene.problems if scene else ()))
        note = ""
        if user is not None and user.problems:
            note = f"{len(user.problems)} malformed line(s) of {user_file(user_id)} left out; the file is read-only"
        facts = tuple(ordered_facts(user.facts)) if user else ()
        places = scene.locations if scene else ()
        rendered = render_context(user_id, facts, extra, places, known_user=user is not None, note=note)
        context = Context(
            user_id=user_id,
            known_user=user is not None,
            facts=facts,
            temporary=extra,
            scene=places,
            rendered=rendered,
            version=version,
            chars=len(rendered),
            tokens=estimate_tokens(rendered),
            problems=problems,
        )
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

    def reference_images(self, user_id: str = "") -> StoredImages:
        """Every remembered reference image of `user_id` ("" = every user), with its bytes:
        the facts whose value is an image path under images/<user>/ (what remember_image
        records). A fact whose file is missing, larger than max_image_bytes or outside the
        user's image folder is left out and named in `problems`. An unknown user has none."""
        users = [validate.user_id(user_id)] if user_id else self.users()
        version = self.version()
        images: list[StoredImage] = []
        problems: list[Problem] = []
        for user in users:
            loaded = self.load(user_file(user))
            for fact in loaded.facts if loaded else ():
                found = stored_image(self.root, user, fact, self.max_image_bytes)
                if isinstance(found, StoredImage):
                    images.append(found)
                elif found is not None:
                    problems.append(found)
        return StoredImages(tuple(images), tuple(problems), version)

    def history(self, file: str = "", limit: int = 0) -> list[Change]:
        """Committed changes, newest first, of one file ("" = all), at most `limit` (0 = all)."""
        if file and not valid_file(file):
            raise InvalidArgument(f"file {file!r}: expected 'scene.md' or 'users/<user_id>.md'")
        if limit < 0:
            raise InvalidArgument(f"limit {limit}: must be >= 0")
        self.journal.refresh()
        return self.journal.query(file, limit)

    # -- writing ------------------------------------------------------------------
    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One write transaction under the cross-process write lock (see core/transaction.py)."""
        with self._writer.transaction() as txn:
            yield txn

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
        with self.transaction() as txn:
            loaded = writable(rel, txn.read(rel))
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
                        rel,
                        "set",
                        entity=entity,
                        key=key,
                        previous=previous or "",
                        new=value,
                        source=source,
                        after=doc.to_bytes(),
                    )
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
        with self.transaction() as txn:
            loaded = writable(rel, txn.read(rel))
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
                    rel,
                    "image",
                    entity=entity,
                    key=key,
                    previous=previous or "",
                    new=image_rel,
                    source=source,
                    after=doc.to_bytes(),
                )
            return image_rel, txn.commit(now)

    def update_scene(self, updates: Sequence[SceneUpdate], now: float) -> list[Change]:
        """Apply observation-driven updates to scene memory, in order; all or nothing.

        One journal entry per location whose contents changed (entity = location, key =
        "contents"); the observed location records the observation time and source.
        """
        if not updates:
            raise InvalidArgument("no updates given")
        checked = [check_update(update, index) for index, update in enumerate(updates)]
        with self.transaction() as txn:
            loaded = writable(SCENE_FILE, txn.read(SCENE_FILE))
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
                        SCENE_FILE,
                        _SCENE_OPS[update.op],
                        entity=after.name,
                        key="contents",
                        previous=previous,
                        new=_join(after.contents),
                        source=update.source,
                        after=doc.to_bytes(),
                    )
            return txn.commit(now)

    def restore(self, version: int, now: float, by: str = "") -> list[Change]:
        """Bring every file the journal knows back to its content at `version`; recorded
        as new changes (op "restore", source "restore:<version>"), so it can be undone.

        NotFound for a version that does not exist; ReadOnly when a file to be replaced
        has malformed lines (fix it or move it away first: it is never overwritten).
        Returns the entries written (empty when the files already match).
        """
        with self.transaction() as txn:
            newest = self.journal.version
            if not 1 <= version <= newest:
                span = f"1..{newest}" if newest else "none yet"
                raise NotFound(f"version {version} does not exist (versions: {span})")
            for rel in sorted(self.journal.by_file):
                if not valid_file(rel):
                    continue
                _known, sha = self.journal.state_at(rel, version)
                target = None if sha is None else self.journal.snapshot(sha)
                current = txn.read(rel)
                if current == target:
                    continue
                writable(rel, current)
                txn.record(rel, "restore", source=f"restore:{version}" + (f" [{by}]" if by else ""), after=target)
            return txn.commit(now)


__all__ = ["MemoryStore"]
