"""Seeding a new, empty memory folder from a seed folder (first start only)."""

from __future__ import annotations

from pathlib import Path

from carryon_memory.core import validate
from carryon_memory.core.errors import SeedError
from carryon_memory.core.files import USERS_DIR, load_file, user_file
from carryon_memory.core.scene import SCENE_FILE
from carryon_memory.core.store import MemoryStore
from carryon_memory.core.types import Change


def seed_from(store: MemoryStore, seed_dir: Path, now: float) -> list[Change]:
    """Copy `seed_dir`'s scene.md and users/*.md into `store` when it is new and empty
    (journaled as op "seed"). Does nothing when the store has any memory file or journal
    entry: seed data is for the first start only and never replaces anything.

    SeedError when `seed_dir` is not a folder or a seed file is unreadable or malformed.
    `now`: seconds since the epoch, for the journal.
    """
    seed_dir = Path(seed_dir)
    if not seed_dir.is_dir():
        raise SeedError(f"seed_dir {seed_dir}: not a folder")
    with store.transaction() as txn:
        if store.journal.changes or (store.root / SCENE_FILE).exists() or store.users():
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
            problems = load_file(rel, data).problems
            if problems:
                raise SeedError("; ".join(f"{seed_dir}/{p}" for p in problems))
            txn.record(rel, "seed", source=f"seed:{seed_dir.name}", after=data)
        return txn.commit(now)
