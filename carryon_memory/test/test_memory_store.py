"""MemoryStore semantics: replacement with history, temporary facts, isolation, scene
updates, restore, validation, images, corrupt files and seed data."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image

from carryon_memory.core.errors import InvalidArgument, NotFound, ReadOnly, SeedError
from carryon_memory.core.seed import seed_from
from carryon_memory.core.store import MemoryStore
from carryon_memory.core.types import Fact, SceneOp, SceneUpdate

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "memory")


def tree(root: Path) -> dict[str, bytes]:
    """Every file under root (except the lock file) with its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"
    }


def journal_lines(store: MemoryStore) -> list[dict[str, object]]:
    path = store.root / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def png(size: tuple[int, int] = (4, 3)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 30)).save(buffer, format="JPEG")
    return buffer.getvalue()


# -- user facts -------------------------------------------------------------------------
def test_a_durable_fact_replaces_the_old_value_and_history_keeps_it(store: MemoryStore) -> None:
    first = store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "dialogue:r1", now=100.0)
    second = store.update_user("alice", [Fact("diet", "preference", "non-vegetarian")], "dialogue:r2", now=200.0)
    text = (store.root / "users/alice.md").read_text()
    assert text == "# User memory: alice\n\n## diet\n- preference: non-vegetarian\n"
    assert [c.version for c in (*first, *second)] == [1, 2]
    (latest, earlier) = store.history("users/alice.md")
    assert (latest.previous_value, latest.new_value, latest.source, latest.time_s) == (
        "vegetarian", "non-vegetarian", "dialogue:r2", 200.0
    )  # fmt: skip
    assert (earlier.previous_value, earlier.new_value, earlier.before) == ("", "vegetarian", None)
    assert store.context("alice").facts == (Fact("diet", "preference", "non-vegetarian"),)
    line = journal_lines(store)[-1]
    assert {"version", "time_s", "file", "entity", "key", "previous_value", "new_value", "source"} <= set(line)


def test_an_unchanged_value_writes_nothing_and_an_empty_value_removes(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("diet", "preference", "vegetarian"), Fact("mug", "colour", "blue")], "op", 1.0)
    before = tree(store.root)
    assert store.update_user("alice", [Fact("Diet", "Preference", "  vegetarian ")], "op", 2.0) == []
    assert tree(store.root) == before
    (removed,) = store.update_user("alice", [Fact("mug", "colour", "")], "op", 3.0)
    assert (removed.op, removed.previous_value, removed.new_value) == ("remove", "blue", "")
    assert "mug" not in (store.root / "users/alice.md").read_text()
    with pytest.raises(NotFound, match=r"facts\[0\]: user 'alice' has no fact mug.colour to remove"):
        store.update_user("alice", [Fact("mug", "colour", "")], "op", 4.0)


def test_a_batch_is_all_or_nothing(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "op", 1.0)
    before = tree(store.root)
    with pytest.raises(NotFound):
        store.update_user("alice", [Fact("diet", "preference", "vegan"), Fact("x", "y", "")], "op", 2.0)
    with pytest.raises(InvalidArgument, match=r"facts\[1\]: value"):
        store.update_user("alice", [Fact("diet", "preference", "vegan"), Fact("x", "y", "a\nb")], "op", 2.0)
    assert tree(store.root) == before


def test_temporary_facts_are_never_written(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "op", 1.0)
    before = tree(store.root)
    wish = Fact("drink", "wish", "tea today", durable=False, source="dialogue:r3")
    context = store.context("alice", [wish])
    assert context.temporary == (wish,)
    assert "- wish: tea today (temporary, this request only)" in context.rendered
    context = store.context("carol", [wish])  # a user without a file: still nothing created
    assert not context.known_user and "tea today" in context.rendered
    with pytest.raises(InvalidArgument, match="temporary"):
        store.update_user("alice", [Fact("diet", "preference", "vegan"), wish], "op", 2.0)
    with pytest.raises(InvalidArgument, match="durable=true"):
        store.context("alice", [Fact("drink", "wish", "tea")])
    assert tree(store.root) == before
    assert "tea" not in "".join(data.decode(errors="replace") for data in tree(store.root).values())


def test_a_users_context_never_contains_another_users_facts(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("diet", "preference", "vegetarian"), Fact("mug", "colour", "red")], "op", 1.0)
    store.update_user("bob", [Fact("diet", "preference", "ham-lover"), Fact("mug", "colour", "green")], "op", 2.0)
    store.update_scene([SceneUpdate(SceneOp.SET_CONTENTS, "kitchen_counter", ("carrot",), source="judge")], 3.0)
    alice, bob = store.context("alice"), store.context("bob")
    assert "ham-lover" not in alice.rendered and "green" not in alice.rendered and "bob" not in alice.rendered
    assert "vegetarian" not in bob.rendered and "red" not in bob.rendered and "alice" not in bob.rendered
    assert {f.value for f in alice.facts} == {"vegetarian", "red"}
    assert alice.scene == bob.scene and "- kitchen_counter: carrot" in alice.rendered  # shared
    scene_only = store.context("")
    assert scene_only.facts == () and "User memory" not in scene_only.rendered
    assert alice.chars == len(alice.rendered) and alice.tokens == -(-alice.chars // 4)


# -- scene ------------------------------------------------------------------------------
def test_scene_updates_replace_contents_move_and_remove_items(store: MemoryStore) -> None:
    store.update_scene(
        [
            SceneUpdate(SceneOp.SET_CONTENTS, "kitchen_counter", ("pink_cover", "carrot under pink_cover", "plate"),
                        observed_s=50.0, source="initial"),
            SceneUpdate(SceneOp.SET_CONTENTS, "dining_table", ("bowl",), observed_s=50.0, source="initial"),
        ],
        now=60.0,
    )  # fmt: skip
    changes = store.update_scene(
        [SceneUpdate(SceneOp.MOVE_ITEM, "dining_table", item="carrot", observed_s=70.0, source="judge:observe:s2")],
        80.0,
    )
    assert [(c.entity, c.previous_value, c.new_value) for c in changes] == [
        ("kitchen_counter", "pink_cover, carrot under pink_cover, plate", "pink_cover, plate"),
        ("dining_table", "bowl", "bowl, carrot"),
    ]
    scene = {loc.name: loc for loc in store.context("").scene}
    assert scene["dining_table"].observed_s == 70.0 and scene["dining_table"].source == "judge:observe:s2"
    assert scene["kitchen_counter"].observed_s == 50.0  # where the item left was not observed
    store.update_scene([SceneUpdate(SceneOp.SET_CONTENTS, "kitchen_counter", ("meat in plate",), source="judge")], 90.0)
    scene = {loc.name: loc for loc in store.context("").scene}
    assert scene["kitchen_counter"].contents == ("meat in plate",) and scene["kitchen_counter"].observed_s == 90.0
    before = tree(store.root)
    with pytest.raises(NotFound, match=r"updates\[1\]: item 'rubiks_cube' is not in scene memory"):
        store.update_scene(
            [SceneUpdate(SceneOp.REMOVE_ITEM, item="bowl"), SceneUpdate(SceneOp.REMOVE_ITEM, item="rubiks_cube")], 95.0
        )
    assert tree(store.root) == before  # all or nothing
    store.update_scene([SceneUpdate(SceneOp.REMOVE_ITEM, item="bowl")], 96.0)
    assert {loc.name: loc.contents for loc in store.context("").scene}["dining_table"] == ("carrot",)


@pytest.mark.parametrize(
    ("update", "match"),
    [
        (SceneUpdate(SceneOp.SET_CONTENTS, "a/b", ("x",)), "may not contain '/'"),
        (SceneUpdate(SceneOp.SET_CONTENTS, "shelf", ("salt, pepper",)), "may not contain ','"),
        (SceneUpdate(SceneOp.MOVE_ITEM, "shelf", item=""), "item is empty"),
        (SceneUpdate(SceneOp.REMOVE_ITEM, "shelf", item="cup"), "takes no location"),
        (SceneUpdate(7, "shelf"), "unknown op 7"),  # type: ignore[arg-type]
    ],
)
def test_invalid_scene_updates_are_refused(store: MemoryStore, update: SceneUpdate, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        store.update_scene([update], 1.0)


# -- history and restore ------------------------------------------------------------------
def test_restore_rebuilds_every_file_at_a_version_and_is_itself_undoable(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "op", 1.0)  # v1
    store.update_scene([SceneUpdate(SceneOp.SET_CONTENTS, "counter", ("carrot",))], 2.0)  # v2
    at_v2 = tree(store.root)
    store.update_user("alice", [Fact("diet", "preference", "omnivore"), Fact("mug", "colour", "red")], "op", 3.0)
    store.update_user("bob", [Fact("diet", "preference", "vegan")], "op", 4.0)  # v5
    store.update_scene([SceneUpdate(SceneOp.SET_CONTENTS, "counter", ())], 5.0)  # v6
    at_v6 = {k: v for k, v in tree(store.root).items() if k.endswith(".md") and not k.startswith("history")}

    changes = store.restore(2, now=10.0)
    assert {c.file for c in changes} == {"users/alice.md", "users/bob.md", "scene.md"}
    assert all(c.op == "restore" and c.source == "restore:2" and c.version > 6 for c in changes)
    assert not (store.root / "users/bob.md").exists()  # bob did not exist at version 2
    for name in ("users/alice.md", "scene.md"):
        assert (store.root / name).read_bytes() == at_v2[name]
    assert store.restore(2, now=11.0) == []  # already there

    store.restore(6, now=12.0)  # undo the restore
    for name, data in at_v6.items():
        assert (store.root / name).read_bytes() == data
    with pytest.raises(NotFound, match=r"version 99 does not exist \(versions: 1\.\."):
        store.restore(99, now=13.0)
    with pytest.raises(NotFound):
        store.restore(0, now=13.0)


def test_history_is_newest_first_filtered_and_limited(store: MemoryStore) -> None:
    for index in range(5):
        store.update_user("alice", [Fact("count", "n", str(index))], "op", float(index))
    store.update_user("bob", [Fact("count", "n", "x")], "op", 9.0)
    assert [c.version for c in store.history()] == [6, 5, 4, 3, 2, 1]
    assert [c.new_value for c in store.history("users/alice.md", limit=2)] == ["4", "3"]
    assert store.history("users/carol.md") == []
    with pytest.raises(InvalidArgument, match=r"expected 'scene\.md' or 'users/<user_id>\.md'"):
        store.history("../journal.jsonl")


def test_a_hand_edit_is_kept_by_the_next_write_and_can_be_restored(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "op", 1.0)
    path = store.root / "users/alice.md"
    path.write_text(path.read_text() + "\n<!-- checked with alice -->\n## bread\n-   type:   rye\n")
    edited = path.read_bytes()
    assert store.context("alice").facts[0] == Fact("bread", "type", "rye")  # picked up without a restart
    (change,) = store.update_user("alice", [Fact("diet", "preference", "vegan")], "op", 2.0)
    assert "<!-- checked with alice -->\n## bread\n-   type:   rye\n" in path.read_text()
    assert (store.root / "history" / f"{change.before}.md").read_bytes() == edited
    store.restore(1, now=3.0)
    assert "rye" not in path.read_text()


# -- validation ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "user_id", ["../alice", "..", "a/b", "/etc/passwd", "", "Alice", ".hidden", "a" * 65, "al\x00ice", "ali ce", "-x"]
)
def test_unsafe_user_ids_are_rejected_and_nothing_is_created(tmp_path: Path, user_id: str) -> None:
    store = MemoryStore(tmp_path / "memory")
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(InvalidArgument, match="user id"):
        store.update_user(user_id, [Fact("diet", "preference", "vegetarian")], "op", 1.0)
    with pytest.raises(InvalidArgument, match="user id"):
        store.remember_image(user_id, entity="mug", key="image", image_format="png", data=png(), source="op", now=1.0)
    if user_id:
        with pytest.raises(InvalidArgument, match="user id"):
            store.context(user_id)
    assert sorted(tmp_path.rglob("*")) == before


def test_a_user_id_with_capitals_gets_a_hint(store: MemoryStore) -> None:
    with pytest.raises(InvalidArgument, match="did you mean 'alice'"):
        store.context("Alice")


@pytest.mark.parametrize(
    ("fact", "match"),
    [
        (Fact("../../etc", "k", "v"), "entity '../../etc': may not contain '/'"),
        (Fact("diet\n## bob", "k", "v"), "control character U\\+000A"),
        (Fact("diet", "a:b", "v"), "key 'a:b': may not contain ':'"),
        (Fact("diet", "k", "line\nbreak"), "control character"),
        (Fact("diet", "k", "spoof\u202e"), "U\\+202E"),
        (Fact("diet", "k", "x" * 2001), "max_value_chars=2000"),
        (Fact("e" * 65, "k", "v"), "longer than 64"),
        (Fact("## diet", "k", "v"), "Markdown syntax"),
    ],
)
def test_names_and_values_that_would_break_the_file_are_rejected(store: MemoryStore, fact: Fact, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        store.update_user("alice", [fact], "op", 1.0)
    assert not (store.root / "users/alice.md").exists()


# -- images -------------------------------------------------------------------------------
def test_an_image_is_stored_content_named_and_recorded_as_a_fact(store: MemoryStore) -> None:
    path, (change,) = store.remember_image(
        "alice", entity="My Mug", key="reference_image", image_format="png", data=png(), source="operator", now=1.0
    )
    assert path.startswith("images/alice/my-mug-reference_image-") and path.endswith(".png")
    assert (store.root / path).read_bytes() == png()
    assert store.context("alice").facts == (Fact("My Mug", "reference_image", path),)
    assert (change.op, change.new_value) == ("image", path)
    newer, _ = store.remember_image(
        "alice", entity="My Mug", key="reference_image", image_format="jpeg", data=jpeg(), source="operator", now=2.0
    )
    assert newer.endswith(".jpg") and (store.root / path).exists()  # the older image stays for restore


@pytest.mark.parametrize(
    ("image_format", "data", "match"),
    [
        ("png", png((3000, 3000)), "more than max_image_bytes=1000"),
        ("gif", b"GIF89a....", "expected 'png' or 'jpeg'"),
        ("png", jpeg(), "declared as 'png' but the data is JPEG"),
        ("jpeg", b"not an image at all", "neither PNG nor JPEG"),
        ("png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "does not decode as PNG"),
        ("png", b"", "empty"),
    ],
)
def test_bad_images_are_rejected(tmp_path: Path, image_format: str, data: bytes, match: str) -> None:
    store = MemoryStore(tmp_path / "memory", max_image_bytes=1000 if len(data) > 1000 else 5_000_000)
    with pytest.raises(InvalidArgument, match=match):
        store.remember_image(
            "alice", entity="mug", key="image", image_format=image_format, data=data, source="op", now=1.0
        )
    assert list((store.root / "images").rglob("*")) == []
    assert not (store.root / "users/alice.md").exists()


def test_reference_images_are_served_with_their_bytes(store: MemoryStore) -> None:
    mug, _ = store.remember_image(
        "alice", entity="mug", key="reference_image", image_format="png", data=png(), source="op", now=1.0
    )
    cup, _ = store.remember_image(
        "bob", entity="cup", key="photo", image_format="jpeg", data=jpeg(), source="op", now=2.0
    )
    store.update_user("alice", [Fact("diet", "preference", "vegan")], "op", 3.0)  # not an image
    found = store.reference_images()
    assert [(i.user_id, i.entity, i.key, i.path, i.image_format) for i in found.images] == [
        ("alice", "mug", "reference_image", mug, "png"), ("bob", "cup", "photo", cup, "jpeg")
    ]  # fmt: skip
    assert [i.data for i in found.images] == [png(), jpeg()]
    assert (found.problems, found.version) == ((), 3)
    assert [i.entity for i in store.reference_images("bob").images] == ["cup"]
    assert store.reference_images("carol").images == ()  # an unknown user has none
    with pytest.raises(InvalidArgument, match="user id"):
        store.reference_images("../alice")


def test_an_image_fact_whose_file_is_unusable_is_left_out_and_named(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "memory", max_image_bytes=1000)
    kept, _ = store.remember_image(
        "alice", entity="mug", key="image", image_format="png", data=png(), source="op", now=1.0
    )
    gone, _ = store.remember_image(
        "alice", entity="cup", key="image", image_format="jpeg", data=jpeg(), source="op", now=2.0
    )
    (store.root / gone).unlink()
    big, _ = store.remember_image(
        "alice", entity="pot", key="image", image_format="png", data=png(), source="op", now=3.0
    )
    (store.root / big).write_bytes(png() + b"\0" * 1000)  # grew on disk after it was checked
    (store.root / "images/bob").mkdir()
    (store.root / "images/bob/x.png").write_bytes(png())
    facts = [Fact("plate", "image", "images/bob/x.png"), Fact("bowl", "image", "images/alice/../../etc/passwd")]
    store.update_user("alice", facts, "hand edit", 4.0)
    found = store.reference_images()
    assert [i.path for i in found.images] == [kept]
    assert [str(p) for p in found.problems] == [
        f"users/alice.md: cup.image: {gone} does not exist; left out",
        f"users/alice.md: pot.image: {big} is {len(png()) + 1000} bytes, more than max_image_bytes=1000; left out",
        "users/alice.md: plate.image: 'images/bob/x.png' is not an image path of this user "
        "(images/alice/<name>.png|jpg); left out",
        "users/alice.md: bowl.image: 'images/alice/../../etc/passwd' is not an image path of this user "
        "(images/alice/<name>.png|jpg); left out",
    ]


# -- corrupt files ----------------------------------------------------------------------------
def test_a_corrupt_file_is_served_read_only_and_never_overwritten(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    MemoryStore(root).update_user("alice", [Fact("diet", "preference", "vegetarian")], "op", 1.0)
    corrupt = b"# bob\n## diet\n- preference: vegan\nthis line is prose\n## mug\n- colour blue\n"
    (root / "users/bob.md").write_bytes(corrupt)

    store = MemoryStore(root)  # start-up does not fail
    problems = [str(p) for p in store.problems()]
    assert problems == [
        "users/bob.md:4: expected a '## section' heading, a '- key: value' line, a comment or a blank line",
        "users/bob.md:6: expected '- key: value', found no ':' in 'colour blue'",
    ]
    bob = store.context("bob")
    assert bob.facts == (Fact("diet", "preference", "vegan"),) and len(bob.problems) == 2
    assert "malformed line(s) of users/bob.md left out; the file is read-only" in bob.rendered
    with pytest.raises(ReadOnly, match=r"users/bob.md:4: expected a '## section' heading") as caught:
        store.update_user("bob", [Fact("diet", "preference", "omnivore")], "op", 2.0)
    assert len(caught.value.problems) == 2
    with pytest.raises(ReadOnly):
        store.remember_image("bob", entity="mug", key="image", image_format="png", data=png(), source="op", now=2.0)
    store.update_user("alice", [Fact("diet", "preference", "vegan")], "op", 3.0)  # others are unaffected
    store.restore(1, now=4.0)  # the journal never wrote bob.md: a restore leaves it alone
    assert (root / "users/bob.md").read_bytes() == corrupt
    assert "users/bob.md" not in {c.file for c in store.history()}


def test_restore_never_overwrites_a_corrupt_file(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "op", 1.0)
    store.update_user("alice", [Fact("diet", "preference", "vegan")], "op", 2.0)
    path = store.root / "users/alice.md"
    path.write_bytes(path.read_bytes() + b"oops\n")
    before = tree(store.root)
    with pytest.raises(ReadOnly, match=r"users/alice.md:5: expected"):
        store.restore(1, now=3.0)
    assert tree(store.root) == before
    path.unlink()  # moving the broken file away lets the restore bring a good one back
    store.restore(1, now=4.0)
    assert store.context("alice").facts == (Fact("diet", "preference", "vegetarian"),)


def test_a_corrupt_scene_refuses_scene_updates(store: MemoryStore) -> None:
    (store.root / "scene.md").write_text("## counter\n- observed: last tuesday\n")
    with pytest.raises(ReadOnly, match=r"scene.md:2: observed 'last tuesday'"):
        store.update_scene([SceneUpdate(SceneOp.SET_CONTENTS, "counter", ("x",))], 1.0)


# -- seed data ---------------------------------------------------------------------------------
def test_seed_data_fills_a_new_store_only(tmp_path: Path) -> None:
    seed = REPO / "config" / "memory"
    store = MemoryStore(tmp_path / "memory")
    changes = seed_from(store, seed, now=1.0)
    assert {c.file for c in changes} == {"scene.md", "users/alice.md", "users/bob.md"}
    assert all(c.op == "seed" and c.before is None for c in changes)
    assert (store.root / "users/alice.md").read_bytes() == (seed / "users/alice.md").read_bytes()
    assert store.problems() == []
    alice = store.context("alice")
    assert Fact("diet", "preference", "vegetarian") in alice.facts
    assert "- kitchen_counter: pink_cover, carrot under pink_cover, plate" in alice.rendered
    store.update_user("alice", [Fact("diet", "preference", "vegan")], "op", 2.0)
    assert seed_from(store, seed, now=3.0) == []  # never again, never over existing files
    assert Fact("diet", "preference", "vegan") in store.context("alice").facts


def test_a_broken_seed_folder_is_a_clear_error(tmp_path: Path) -> None:
    seed = tmp_path / "seed"
    (seed / "users").mkdir(parents=True)
    (seed / "users" / "alice.md").write_text("## diet\npreference vegetarian\n")
    store = MemoryStore(tmp_path / "memory")
    with pytest.raises(SeedError, match=r"seed/users/alice.md:2: expected"):
        seed_from(store, seed, now=1.0)
    with pytest.raises(SeedError, match="not a folder"):
        seed_from(store, tmp_path / "missing", now=1.0)
    assert not (store.root / "users/alice.md").exists()
