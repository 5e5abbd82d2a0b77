"""What the planner needs to keep users apart (GetContext's `other_users` and
`foreign_values`): the ids of the other users who have a memory file, and the fact values
only they hold. The planner's validator refuses a plan that writes another user's value
or names another user in this user's memory, and the summariser leaves such facts out.
These lists are for those checks only: memory_node never renders them into the context.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from carryon_memory.core.files import user_file
from carryon_memory.core.markdown import fold
from carryon_memory.core.store import MemoryStore


@dataclass(frozen=True)
class Others:
    users: tuple[str, ...]
    foreign_values: tuple[str, ...]  # sorted, without the values `user_id` holds too (case-folded)


def others(store: MemoryStore, user_id: str) -> Others:
    """The other users of `store` and the values only they hold ("" = every user's are foreign)."""
    users = tuple(u for u in store.users() if u != user_id)
    own = store.load(user_file(user_id)) if user_id else None
    theirs = (store.load(user_file(other)) for other in users)
    return Others(
        users,
        foreign_values(
            (f.value for f in own.facts) if own is not None else (),
            (f.value for loaded in theirs if loaded is not None for f in loaded.facts),
        ),
    )


def foreign_values(mine: Iterable[str], theirs: Iterable[str]) -> tuple[str, ...]:
    """The values in `theirs` that are not in `mine` (case-folded), each once, sorted."""
    own = {fold(v) for v in mine}
    values: dict[str, str] = {}
    for value in theirs:
        if value and fold(value) not in own:
            values.setdefault(fold(value), value)
    return tuple(values[k] for k in sorted(values))
