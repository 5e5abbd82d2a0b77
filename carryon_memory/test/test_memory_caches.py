"""What the store keeps between GetContext requests (parsed files, each user's rendered
context, the other users and the values only they hold) always equals what a store
without caches computes: after every kind of write, a write by another process, and
hand edits."""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from carryon_memory.core.files import user_file
from carryon_memory.core.others import Others, foreign_values, others
from carryon_memory.core.repair import repair
from carryon_memory.core.store import MemoryStore
from carryon_memory.core.types import Context, Fact, SceneOp, SceneUpdate

# Users asked for: with a file, without one (yet), and "" (scene memory only).
ASKED = ("", "alice", "bob", "carol", "dave", "zoe")


def recount(root: Path, user_id: str) -> tuple[Context, Others]:
    """A new store's answer, nothing cached; the other users' values counted from every file."""
    fresh = MemoryStore(root)
    users = [user for user in fresh.users() if user != user_id]
    own = fresh.load(user_file(user_id)) if user_id else None
    theirs = [fact.value for user in users for fact in getattr(fresh.load(user_file(user)), "facts", ())]
    mine = [fact.value for fact in own.facts] if own is not None else []
    return fresh.context(user_id), Others(tuple(users), foreign_values(mine, theirs))


def answers(store: MemoryStore) -> dict[str, tuple[Context, Others]]:
    return {user: (store.context(user), others(store, user)) for user in ASKED}


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    """Three users whose values overlap when case-folded, a scene, every answer asked once."""
    store = MemoryStore(tmp_path / "memory")
    store.update_user("alice", [Fact("diet", "preference", "vegetarian"), Fact("drink", "wish", "Tea")], "op", 1.0)
    store.update_user(
        "bob",
        [Fact("diet", "preference", "VEGETARIAN"), Fact("drink", "wish", "coffee"), Fact("snack", "kind", "chips")],
        "op",
        2.0,
    )
    store.update_user(
        "carol", [Fact("drink", "wish", "tea"), Fact("snack", "kind", "Chips"), Fact("mug", "colour", "red")], "op", 3.0
    )
    store.update_scene([SceneUpdate(SceneOp.SET_CONTENTS, "counter", ("plate",), source="judge")], 4.0)
    answers(store)
    return store


def _broken_bob_repaired(store: MemoryStore) -> None:
    path = store.root / user_file("bob")
    path.write_bytes(path.read_bytes() + b"\n## snack #\n- kind: pretzels\nthis line is prose\n")
    answers(store)  # the broken file is what the caches hold when the repair runs
    repair(store, [user_file("bob")], now=9.0)


def _edited_in_place(store: MemoryStore) -> None:
    with (store.root / user_file("carol")).open("ab") as stream:  # same inode: only size and times change
        stream.write(b"\n## lunch\n- drink: Lemonade\n")


WRITES: dict[str, Callable[[MemoryStore], object]] = {
    "update_user sets a value": lambda s: s.update_user("bob", [Fact("drink", "wish", "TEA")], "op", 5.0),
    "update_user removes a fact": lambda s: s.update_user("carol", [Fact("mug", "colour", "")], "op", 5.0),
    "update_user adds a user": lambda s: s.update_user("dave", [Fact("diet", "preference", "Vegan")], "op", 5.0),
    "update_scene": lambda s: s.update_scene([SceneUpdate(SceneOp.MOVE_ITEM, "sink", item="plate")], 5.0),
    "remember_image": lambda s: s.remember_image(
        "alice", entity="mug", key="photo", image_format="png", data=png(), source="op", now=5.0
    ),
    "restore": lambda s: s.restore(2, 5.0),
    "repair": _broken_bob_repaired,
    "a write by another process": lambda s: MemoryStore(s.root).update_user(
        "alice", [Fact("snack", "kind", "crisps")], "op", 5.0
    ),
    "a hand edit in place": _edited_in_place,
    "a file deleted by hand": lambda s: (s.root / user_file("carol")).unlink(),
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
def test_every_answer_after_a_write_is_what_a_store_without_caches_gives(
    store: MemoryStore, write: Callable[[MemoryStore], object]
) -> None:
    before = answers(store)
    write(store)
    after = answers(store)
    assert after != before  # the write changed what GetContext serves ...
    assert after == {user: recount(store.root, user) for user in ASKED}  # ... and the caches have it


def test_unchanged_memory_is_answered_with_the_same_objects(store: MemoryStore) -> None:
    # memory_node keeps the converted messages of a context by its identity
    assert store.context("alice") is store.context("alice")
    assert others(store, "alice") is others(store, "alice")
    store.update_user("bob", [Fact("drink", "wish", "water")], "op", 5.0)
    assert others(store, "alice") == recount(store.root, "alice")[1]


def test_the_other_users_values_are_the_first_of_each_folded_value_in_user_order(store: MemoryStore) -> None:
    # bob writes VEGETARIAN and chips first (alice holds vegetarian and Tea, so neither is foreign to her)
    assert others(store, "alice") == Others(("bob", "carol"), ("chips", "coffee", "red"))
    assert others(store, "carol") == Others(("alice", "bob"), ("coffee", "vegetarian"))
    assert others(store, "zoe").foreign_values == ("chips", "coffee", "red", "Tea", "vegetarian")
    assert others(store, "") == others(store, "zoe")


def test_random_writes_keep_the_other_users_values_exact(tmp_path: Path) -> None:
    rng = random.Random(7)
    store = MemoryStore(tmp_path / "memory")
    values = ["tea", "Tea", "TEA", "coffee", "Coffee", "chips", "red", "blue", "Blue", "vegan"]
    users = ["u1", "u2", "u3", "u4", "u5"]
    for step in range(60):
        user, entity, key = rng.choice(users), rng.choice(["diet", "drink"]), rng.choice(["a", "b", "c"])
        value = rng.choice(values) if rng.random() < 0.8 else ""
        if value or (store.load(user_file(user)) and store.load(user_file(user)).doc.get(entity, key)):
            store.update_user(user, [Fact(entity, key, value)], "op", float(step))
        for asked in rng.sample(["", *users, "u9"], 3):
            assert others(store, asked) == recount(store.root, asked)[1], (step, asked)
