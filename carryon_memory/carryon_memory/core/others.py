"""What the planner needs to keep users apart (GetContext's `other_users` and
`foreign_values`): the ids of the other users who have a memory file, and the fact values
only they hold. The planner's validator refuses a plan that writes another user's value
or names another user in this user's memory, and the summariser leaves such facts out.
These lists are for those checks only: memory_node never renders them into the context.
"""

from __future__ import annotations

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
    mine = {fold(f.value) for f in own.facts} if own is not None else set()
    values: dict[str, str] = {}
    for other in users:
        loaded = store.load(user_file(other))
        for fact in loaded.facts if loaded is not None else ():
            if fact.value and fold(fact.value) not in mine:
                values.setdefault(fold(fact.value), fact.value)
    return Others(users, tuple(values[k] for k in sorted(values)))
