"""`carryon memory repair` (core/repair.py): each kind of problem that makes a memory file
read-only is fixed without losing a line; the result parses with no problems, is
journalled, can be undone with restore, and stays writable. Also: a read-only file names
its problem and the command that repairs it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from carryon_memory.core import validate
from carryon_memory.core.errors import ReadOnly
from carryon_memory.core.files import load_file
from carryon_memory.core.markdown import SectionDoc
from carryon_memory.core.repair import FixKind, escape, memory_files, plan_folder, plan_repair, repair
from carryon_memory.core.store import MemoryStore
from carryon_memory.core.types import Fact, SceneOp, SceneUpdate

NOW = 1_764_493_200.0  # 2025-11-30T09:00:00Z
USER = "users/alice.md"


@pytest.fixture
def store(tmp_path: Path) -> MemoryStore:
    return MemoryStore(tmp_path / "memory")


def repaired(data: bytes, rel: str = USER) -> tuple[str, set[tuple[str, str, str]], dict[FixKind, list[int]]]:
    """(text after the repair, facts it serves, fix lines by kind); asserts the result parses cleanly."""
    plan = plan_repair(rel, data, NOW)
    assert plan.problems and plan.changed
    loaded = load_file(rel, plan.after)
    assert loaded.problems == ()
    kinds: dict[FixKind, list[int]] = {}
    for fix in plan.fixes:
        kinds.setdefault(fix.kind, []).append(fix.line)
    return plan.after.decode("utf-8"), {(f.entity, f.key, f.value) for f in loaded.facts}, kinds


def set_aside(text: str) -> str:
    """The set-aside comment at the end of a repaired file."""
    return text[text.index("<!-- Set aside by `carryon memory repair`") :]


# -- each kind of problem -----------------------------------------------------------------
def test_sections_written_twice_with_a_trailing_hash_merge_and_the_later_value_wins() -> None:
    # What `memory set --user alice "snack #" preference ...` run twice made an older version write.
    old = b"# User memory: alice\n\n## snack #\n- preference: chips\n\n## snack #\n- preference: crisps\n- size: big\n"
    text, facts, fixes = repaired(old)
    assert facts == {("snack", "preference", "crisps"), ("snack", "size", "big")}
    assert text.startswith("# User memory: alice\n\n## snack\n- preference: crisps\n- size: big\n\n<!--")
    assert "line 4: superseded by line 7" in set_aside(text) and "    - preference: chips\n" in set_aside(text)
    assert fixes == {FixKind.RENAMED: [3], FixKind.SUPERSEDED: [4], FixKind.MERGED: [6]}


def test_headings_that_read_the_same_once_normalised_are_merged() -> None:
    # A zero-width space, another case, a decomposed accent and closing hashes: all one section.
    old = (
        "## diet\n- preference: vegetarian\n- drink: tea\n\n"
        "## di\u200bet\n- preference: vegan\n\n"
        "## DIET ##\n- allergy: peanuts\n\n"
        "## cafe\u0301\n- order: tea\n## caf\u00e9\n- order: coffee\n"
    ).encode()
    text, facts, fixes = repaired(old)
    assert facts == {
        ("diet", "drink", "tea"),
        ("diet", "preference", "vegan"),
        ("diet", "allergy", "peanuts"),
        ("caf\u00e9", "order", "coffee"),
    }
    assert text.count("## diet") == 1 and text.count("## caf\u00e9") == 1 and "\u200b" not in text
    assert fixes[FixKind.MERGED] == [5, 8, 13] and fixes[FixKind.SUPERSEDED] == [2, 12]
    assert fixes[FixKind.RENAMED] == [11]  # the decomposed accent, written composed


def test_a_key_set_twice_keeps_the_last_value_and_keys_are_normalised() -> None:
    old = "## diet\n- preference: vegetarian\n* Pre\u200bference: vegan\n- drink #: tea\n".encode()
    text, facts, fixes = repaired(old)
    assert facts == {("diet", "Preference", "vegan"), ("diet", "drink", "tea")}
    assert "* Preference: vegan\n- drink: tea\n" in text
    assert "line 2: superseded by line 3" in set_aside(text) and "    - preference: vegetarian" in text
    assert fixes == {FixKind.SUPERSEDED: [2], FixKind.RENAMED: [3, 4]}


def test_lines_that_are_not_memory_are_set_aside_with_their_line_and_reason() -> None:
    old = (
        b"- orphan: before any section\n"  # 1
        b"## diet\n"  # 2
        b"- preference: vegan\n"  # 3
        b"just some prose --> with a comment end\n"  # 4
        b"- colour blue\n"  # 5
        b"- : empty key\n"  # 6
        b"- empty:\n"  # 7 a user fact without a value
        b"## bad/name\n"  # 8
        b"- size: large\n"  # 9 under an invalid heading
        b"<!-- a note -->\n"  # 10 kept where it is
        b"## mug\n"  # 11
        b"- colour: blue\n"  # 12
    )
    text, facts, fixes = repaired(old)
    assert facts == {("diet", "preference", "vegan"), ("mug", "colour", "blue")}  # as served before the repair
    assert fixes == {FixKind.SET_ASIDE: [1, 4, 5, 6, 7, 8, 9]}
    aside = set_aside(text)
    for number, line in [(1, "- orphan: before any section"), (5, "- colour blue"), (6, "- : empty key"),
                         (7, "- empty:"), (8, "## bad/name"), (9, "- size: large")]:  # fmt: skip
        assert f"line {number}: " in aside and f"\n    {line}\n" in aside
    assert "    just some prose --\\> with a comment end\n" in aside  # '-->' would end the comment early
    assert "may not contain '/'" in aside and "under the heading of line 8" in aside
    assert text.startswith("## diet\n- preference: vegan\n<!-- a note -->\n## mug\n- colour: blue\n")


def test_nul_control_characters_and_invalid_utf8_are_set_aside_escaped() -> None:
    old = b"## diet\n- preference: veg\x00an\n- drink: caf\xe9\n- bell: ring\x07\n"
    old += b"## mu\x00g\n- colour: blue\n- ok: yes\n"
    plan = plan_repair(USER, old, NOW)
    text = plan.after.decode("utf-8")  # strict: the repaired file is valid UTF-8
    assert "\x00" not in text and "\x07" not in text
    aside = set_aside(text)
    assert "    - preference: veg\\x00an" in aside and "    - drink: caf\\xe9" in aside
    assert "    - bell: ring\\x07" in aside and "    ## mu\\x00g" in aside and "    - colour: blue" in aside
    assert "not valid UTF-8 (byte 0xe9" in aside and "NUL" in aside
    assert {(f.entity, f.key) for f in load_file(USER, plan.after).facts} == set()  # nothing new is served
    assert load_file(USER, plan.after).problems == ()


def test_a_heading_with_invalid_utf8_takes_its_facts_aside_instead_of_merging_them_upwards() -> None:
    old = b"## diet\n- preference: vegan\n## dr\xffink\n- preference: tea\n"
    _, facts, fixes = repaired(old)
    assert facts == {("diet", "preference", "vegan")}  # tea does not become the diet preference
    assert fixes == {FixKind.SET_ASIDE: [3, 4]}


def test_a_comment_never_closed_is_closed_and_keeps_its_lines_as_comment() -> None:
    old = b"## diet\n- preference: vegan\n<!-- draft\n## mug\n- colour: red\n"
    text, facts, fixes = repaired(old)
    assert facts == {("diet", "preference", "vegan")}  # the commented-out facts stay commented out
    assert text == "## diet\n- preference: vegan\n<!-- draft\n## mug\n- colour: red\n-->\n"
    assert fixes == {FixKind.CLOSED: [3]}


def test_a_scene_observed_that_is_not_a_time_is_set_aside_and_the_location_served_again() -> None:
    old = b"# Scene memory\n\n## counter\n- contents: carrot, plate\n- observed: last tuesday\n- source: op\n"
    assert load_file("scene.md", old).locations == ()  # the location is left out while it is read-only
    plan = plan_repair("scene.md", old, NOW)
    (location,) = load_file("scene.md", plan.after).locations
    assert (location.name, location.contents, location.observed_s) == ("counter", ("carrot", "plate"), 0.0)
    assert "- observed: last tuesday" in set_aside(plan.after.decode())


def test_crlf_and_a_byte_order_mark_are_kept() -> None:
    old = b"\xef\xbb\xbf# alice\r\n## diet\r\n- preference: veg\r\n## diet #\r\n- preference: vegan\r\nprose\r\n"
    plan = plan_repair(USER, old, NOW)
    assert plan.after.startswith(b"\xef\xbb\xbf# alice\r\n## diet\r\n- preference: vegan\r\n\r\n<!--")
    assert b"\n" not in plan.after.replace(b"\r\n", b"") and load_file(USER, plan.after).problems == ()


def test_a_file_without_problems_is_left_byte_identical() -> None:
    fine = b"\xef\xbb\xbf# alice\n\n## Diet ##\n  * preference :  vegan  \n<!-- note -->\n"
    plan = plan_repair(USER, fine, NOW)
    assert not plan.problems and not plan.fixes and plan.after == fine


def test_random_broken_files_always_repair_to_clean_files_that_keep_every_line() -> None:
    pieces = [
        "# title", "## diet", "## di\u200bet", "## Diet #", "## bad/name", "##", "- preference: vegan",
        "- preference: veg", "* drink: tea", "- nokey", "- : x", "- k:", "prose", "> quote", "<!-- c -->",
        "<!-- open", "close -->", "", "- v: a\x00b", "- observed: soon", "- observed: 2026-01-01T00:00:00Z",
        "## caf\u00e9", "## cafe\u0301", "- x --> y: z", "\t", "- p\u200bk: 1", "- pk: 2",
    ]  # fmt: skip
    rng = random.Random(19)
    for trial in range(400):
        lines = [rng.choice(pieces) for _ in range(rng.randint(1, 14))]
        data = "\n".join(lines).encode() + (b"\n" if trial % 2 else b"") + (b"\xff\n" if trial % 7 == 0 else b"")
        for rel in (USER, "scene.md"):
            plan = plan_repair(rel, data, NOW)
            assert load_file(rel, plan.after).problems == (), (rel, data)
            assert plan_repair(rel, plan.after, NOW).after == plan.after  # a repaired file needs no repair
            # Every line of the original is in the result: as it was (also inside a comment), set
            # aside, or (a merged heading, a renamed key) by its normalised name.
            text = plan.after.decode()
            for line in {line.strip() for line in lines if line.strip()}:
                name = validate.normalise(line.lstrip("#*- ").split(":")[0]).casefold()
                kept = line in text or escape(line).replace("-->", "--\\>") in text
                assert kept or name in text.casefold(), (line, data)


# -- through the store: journalled, undone by restore, writable after -------------------------
def test_repair_is_journalled_restore_undoes_it_and_the_file_stays_writable(store: MemoryStore) -> None:
    store.update_user("alice", [Fact("diet", "preference", "vegetarian")], "op", 1.0)  # version 1
    path = store.root / USER
    broken = path.read_bytes() + b"\n## snack #\n- preference: chips\n\n## snack #\n- preference: crisps\noops\n"
    path.write_bytes(broken)  # edited by hand since version 1
    with pytest.raises(ReadOnly):
        store.update_user("alice", [Fact("diet", "preference", "vegan")], "op", 2.0)

    result = repair(store, [USER], now=3.0)
    edit, fixed = result.changes  # the hand-edited content becomes version 2, the repair version 3
    assert (edit.op, edit.version, edit.source) == ("edit", 2, "repair: as found, edited outside the store")
    assert (fixed.op, fixed.version, fixed.source, result.undo_version) == ("repair", 3, "repair", 2)
    assert store.history(USER, limit=2) == [fixed, edit] and store.problems() == []
    store.update_user("alice", [Fact("snack", "preference", "pretzels")], "op", 4.0)  # a later write succeeds
    assert Fact("snack", "preference", "pretzels") in store.context("alice").facts
    assert repair(store, [USER], now=5.0).changes == ()  # nothing left to repair

    store.restore(1, now=6.0)  # the version before the hand edit is still there
    assert store.context("alice").facts == (Fact("diet", "preference", "vegetarian"),)
    store.restore(result.undo_version, now=7.0)  # the repair undone: the file exactly as it was found
    assert path.read_bytes() == broken


def test_a_file_the_journal_never_wrote_is_repaired_and_restored_as_it_was(store: MemoryStore) -> None:
    store.update_user("bob", [Fact("diet", "preference", "vegan")], "op", 1.0)
    path = store.root / "users/carol.md"
    broken = b"## diet\n- drink: tea\n## Diet\n- drink: coffee\n"
    path.write_bytes(broken)
    result = repair(store, memory_files(store.root), now=2.0)
    assert [(c.op, c.file) for c in result.changes] == [("repair", "users/carol.md")] and result.undo_version == 1
    store.restore(result.undo_version, now=3.0)
    assert path.read_bytes() == broken


def test_a_repaired_scene_accepts_scene_updates_again(store: MemoryStore) -> None:
    (store.root / "scene.md").write_text("## counter\n- contents: x\n## counter #\n- contents: carrot\n")
    update = SceneUpdate(SceneOp.SET_CONTENTS, "counter", ("plate",), source="judge")
    with pytest.raises(ReadOnly, match=r"scene\.md:3: duplicate section 'counter'.*carryon memory repair --scene"):
        store.update_scene([update], 1.0)
    repair(store, memory_files(store.root), now=2.0)
    store.update_scene([update], 3.0)
    assert store.context("").scene[0].contents == ("plate",) and store.problems() == []


def test_the_dry_run_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    (root / "users").mkdir(parents=True)
    (root / USER).write_bytes(b"## diet\n- a: 1\n## diet\n- a: 2\n")
    (root / "users/bob.md").write_bytes(b"## diet\n- a: 1\n")
    (root / "users/Carol.md").write_bytes(b"prose\n")  # not a memory file the store manages
    before = {p: p.read_bytes() for p in root.rglob("*")  if p.is_file()}  # fmt: skip
    plans = plan_folder(root, memory_files(root), NOW)
    assert [(p.file, p.changed) for p in plans] == [(USER, True), ("users/bob.md", False)]
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # no lock file, no journal


# -- a read-only file names its problem ---------------------------------------------------------
def test_the_write_refusal_names_file_line_problem_and_the_repair(store: MemoryStore) -> None:
    (store.root / "users/bob.md").write_text("## diet\n- preference: vegan\n## di\u200bet\n- preference: ham\n")
    with pytest.raises(ReadOnly) as caught:
        store.update_user("bob", [Fact("diet", "drink", "tea")], "op", 1.0)
    message = str(caught.value)
    assert message.startswith("users/bob.md is read-only until it is repaired (1 problem;")
    assert "users/bob.md:3: duplicate section 'diet' (first at line 1; this one is written 'di\\u200bet'" in message
    assert "Run `carryon memory repair --user bob`" in message


def test_a_duplicate_key_names_how_it_is_written() -> None:
    doc = SectionDoc("## diet\n- preference: a\n- pre\u200bference: b\n", USER)
    assert "first at line 2; this one is written 'pre\\u200bference', which reads as 'preference'" in str(
        doc.problems[0]
    )
