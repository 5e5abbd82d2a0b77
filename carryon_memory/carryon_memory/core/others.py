"""What the planner needs to keep users apart (GetContext's `other_users` and
`foreign_values`): the ids of the other users who have a memory file, and the fact values
only they hold. The planner's validator refuses a plan that writes another user's value
or names another user in this user's memory, and the summariser leaves such facts out.
These lists are for those checks only: memory_node never renders them into the context.

They are asked for on every GetContext, and computing them reads every fact of every
user: at 50 users x 100 facts that was ~2.6 ms of a request (issue 43), more than the rest
of the node's work. User files change rarely, so `OthersIndex` keeps, for the user files
it last saw, each file's folded values, the first value of each folded value over all
users, and every answer given; a changed file (a new parsed object, see
`files.ParsedFiles`) refolds that file only and drops the answers.
"""

from __future__ import annotations

import bisect
import secrets
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from carryon_memory.core.files import Loaded
from carryon_memory.core.markdown import fold

if TYPE_CHECKING:
    from carryon_memory.core.store import MemoryStore

UserFiles = Sequence[tuple[str, Loaded | None]]  # (user id, parsed file or None), sorted by id


@dataclass(frozen=True)
class Others:
    users: tuple[str, ...]
    foreign_values: tuple[str, ...]  # sorted, without the values `user_id` holds too (case-folded)
    # Names the user files these were computed from: a new random number whenever one changes,
    # so a caller that keeps them (the planner) is told they still hold (GetContext.others_token).
    token: int = field(default=0, compare=False)


def others(store: MemoryStore, user_id: str) -> Others:
    """The other users of `store` and the values only they hold ("" = every user's are foreign).

    Costs one `stat` per user file (so hand edits count at once); the rest is recomputed
    only after a user file changed."""
    return store.others_index.answer(user_id, store.files.user_files())


def foreign_values(mine: Iterable[str], theirs: Iterable[str]) -> tuple[str, ...]:
    """The values in `theirs` that are not in `mine` (case-folded), each once, sorted."""
    own = {fold(v) for v in mine}
    values: dict[str, str] = {}
    for value in theirs:
        if value and fold(value) not in own:
            values.setdefault(fold(value), value)
    return tuple(values[k] for k in sorted(values))


def _first_values(loaded: Loaded) -> dict[str, str]:
    """Folded value -> the first value of the file that folds to it, in file order."""
    firsts: dict[str, str] = {}
    for fact in loaded.facts:
        if fact.value:
            firsts.setdefault(fold(fact.value), fact.value)
    return firsts


class OthersIndex:
    """`Others` of every user for the user files last seen; the same answers as
    `foreign_values` over every other user's facts in id order, without reading them all
    on every request. Thread-safe (memory_node answers GetContext on several threads).

    One table serves every user: a folded value the asking user does not hold is held by
    other users only, so the value it stands for is the first one over all users in id
    order, which is what `foreign_values` picks from the other users. The table is sorted
    by folded value, so an answer is the table without the asking user's rows (cut out by
    bisection), and a changed file updates only the rows of its own values.
    """

    def __init__(self, max_answers: int = 1024) -> None:
        self._lock = threading.Lock()
        self._max_answers = max_answers
        self._reset()

    def _reset(self) -> None:
        self._files: tuple[tuple[str, Loaded | None], ...] = ()  # kept: compared by identity
        self._folded: dict[str, tuple[Loaded, dict[str, str]]] = {}  # user -> (file, _first_values)
        self._holders: dict[str, list[str]] = {}  # folded value -> the users holding it, sorted
        # The table: every folded value held (sorted) and the first value over all users of each.
        self._keys: list[str] = []
        self._values: list[str] = []
        self._answers: dict[str, Others] = {}
        self._token = secrets.randbits(63) | 1

    def answer(self, user_id: str, files: UserFiles) -> Others:
        """`Others` of `user_id` among `files` (every user with a memory file, sorted by id)."""
        with self._lock:
            if not self._unchanged(files):
                try:
                    self._update(files)
                except BaseException:
                    self._reset()  # never serve from a half-updated table: start from scratch next time
                    raise
            found = self._answers.get(user_id)
            if found is None:
                users = tuple(user for user, _loaded in self._files if user != user_id)
                found = Others(users, self._foreign(user_id), self._token)
                if len(self._answers) >= self._max_answers:
                    self._answers.clear()
                self._answers[user_id] = found
            return found

    def _foreign(self, user_id: str) -> tuple[str, ...]:
        mine = self._folded.get(user_id, (None, {}))[1]
        values: list[str] = []
        start = 0
        for row in sorted(bisect.bisect_left(self._keys, key) for key in mine):  # every one is in the table
            values += self._values[start:row]
            start = row + 1
        values += self._values[start:]
        return tuple(values)

    def _unchanged(self, files: UserFiles) -> bool:
        return len(files) == len(self._files) and all(
            user == seen_user and loaded is seen
            for (user, loaded), (seen_user, seen) in zip(files, self._files, strict=True)
        )

    def _update(self, files: UserFiles) -> None:
        present = {user: loaded for user, loaded in files if loaded is not None}
        touched: set[str] = set()
        for user in [u for u in self._folded if u not in present]:
            touched |= self._refold(user, None)
        for user, loaded in present.items():
            known = self._folded.get(user)
            if known is None or known[0] is not loaded:
                touched |= self._refold(user, loaded)
        if len(touched) * 8 > len(self._keys):  # the first time, or most of it: sort it anew
            self._keys = sorted(self._holders)
            self._values = [self._first(key) for key in self._keys]
        else:
            for key in touched:
                self._set_row(key)
        self._files, self._answers = tuple(files), {}
        self._token = secrets.randbits(63) | 1  # never 0: 0 is "none kept"

    def _refold(self, user: str, loaded: Loaded | None) -> set[str]:
        """Take `user`'s file as it is now (None: it is gone); returns the folded values whose
        row may have changed: those it holds no more or newly, or now writes differently."""
        before = self._folded.pop(user, (None, {}))[1]
        firsts = _first_values(loaded) if loaded is not None else {}
        if loaded is not None:
            self._folded[user] = (loaded, firsts)
        for key in before.keys() - firsts.keys():
            holders = self._holders[key]
            holders.remove(user)
            if not holders:
                del self._holders[key]
        for key in firsts.keys() - before.keys():
            bisect.insort(self._holders.setdefault(key, []), user)
        return (before.keys() ^ firsts.keys()) | {
            key for key in before.keys() & firsts.keys() if before[key] != firsts[key]
        }

    def _set_row(self, key: str) -> None:
        row = bisect.bisect_left(self._keys, key)
        there = row < len(self._keys) and self._keys[row] == key
        if key not in self._holders:
            if there:
                del self._keys[row], self._values[row]
        elif there:
            self._values[row] = self._first(key)
        else:
            self._keys.insert(row, key)
            self._values.insert(row, self._first(key))

    def _first(self, key: str) -> str:
        return self._folded[self._holders[key][0]][1][key]
