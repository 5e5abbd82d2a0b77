"""Names that used to lock a memory file (issue 19's probes): a trailing ` #`, invisible
characters, NUL; and the rule that a write never leaves a file the parser rejects."""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_memory.core import validate
from carryon_memory.core.errors import InvalidArgument
from carryon_memory.core.markdown import SectionDoc
from carryon_memory.core.store import MemoryStore
from carryon_memory.core.types import Fact, SceneOp, SceneUpdate


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "memory")


def test_a_trailing_hash_written_twice_keeps_one_section_and_a_writable_file(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("snack #", "preference", "chips")], "cli", 1.0)
    store.update_user("alice", [Fact("snack #", "preference", "crisps")], "cli", 2.0)
    store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "cli", 3.0)  # still writable
    text = (store.root / "users/alice.md").read_text()
    assert text.count("## snack") == 1 and "#\n" not in text.replace("# User", "")
    assert not store.problems()
    assert Fact("snack", "preference", "crisps") in store.context("alice").facts


def test_a_trailing_hash_in_a_location_does_not_lock_the_scene(store: MemoryStore) -> None:
    for t in (1.0, 2.0):
        store.update_scene([SceneUpdate(SceneOp.SET_CONTENTS, "kitchen_counter #", ("carrot",), source="judge")], t)
    store.update_scene([SceneUpdate(SceneOp.SET_CONTENTS, "dining_table", ("bowl",), source="judge")], 3.0)
    assert not store.problems()
    assert (store.root / "scene.md").read_text().count("## kitchen_counter") == 1


def test_invisible_characters_and_unicode_forms_name_the_same_section(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "cli", 1.0)
    store.update_user("alice", [Fact("di\u200bet", "preference", "vegan")], "cli", 2.0)  # zero-width space
    store.update_user("alice", [Fact("cafe\u0301", "order", "tea")], "cli", 3.0)  # e + combining accent
    store.update_user("alice", [Fact("caf\u00e9", "order", "coffee")], "cli", 4.0)  # precomposed é
    text = (store.root / "users/alice.md").read_text()
    assert text.count("## diet") == 1 and "\u200b" not in text and text.count("## caf") == 1
    assert set(store.context("alice").facts) == {
        Fact("diet", "preference", "vegan"),
        Fact("caf\u00e9", "order", "coffee"),
    }


def test_names_that_cannot_be_normalised_are_refused_clearly() -> None:
    assert validate.entity("  snack # ## ") == "snack"
    assert validate.entity("C#") == "C#"  # no space before it: not Markdown's closing sequence
    with pytest.raises(InvalidArgument, match="NUL"):
        validate.key("pref\x00erence")
    with pytest.raises(InvalidArgument, match="entity '#': may not start with '#'"):
        validate.entity("\u200b #")


def test_a_write_that_would_not_read_back_is_undone() -> None:
    doc = SectionDoc("# User memory: alice\n", "users/alice.md")
    before = doc.render()
    with pytest.raises(InvalidArgument, match="would make the file malformed"):
        doc.set("snack #", "preference", "chips")  # unvalidated: the heading would read back as 'snack'
    assert doc.render() == before and not doc.problems
