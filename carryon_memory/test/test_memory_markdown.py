"""The Markdown section format: lossless round trip, tolerant parsing, precise problems."""

from __future__ import annotations

import pytest

from carryon_memory.core.markdown import SectionDoc
from carryon_memory.core.render import estimate_tokens, render_context
from carryon_memory.core.scene import format_time, locations, parse_time
from carryon_memory.core.types import Fact, Location

HUMAN = """\ufeff# User memory: alice

Some words are not allowed here, but the lines below are all fine.
"""

TOLERATED = [
    "",
    "\n",
    "# User memory: alice\n\n## diet\n- preference: vegetarian\n",
    "# alice\n## diet\n* preference :   vegetarian   \n+ allergy: peanuts: severe\n",  # spacing, bullets, ':' in value
    "## diet\r\n- preference: vegetarian\r\n\r\n## mug\r\n- colour: blue\r\n",  # CRLF
    "## diet\n- preference: vegetarian",  # no final newline
    "\ufeff# alice\n\n## Diet ##\n  - preference: vegetarian\n\t\n",  # BOM, closing hashes, indented bullet
    "# alice\n<!-- a note -->\n> a quote\n<!--\nseveral\nlines -->\n## diet\n- preference: vegetarian\n\n\n",
    "### deep heading\n- key: value\n###### deeper\n- key: value\n",
]


@pytest.mark.parametrize("text", TOLERATED)
def test_a_no_op_load_and_save_is_byte_identical(text: str) -> None:
    doc = SectionDoc.from_bytes(text.encode(), "users/alice.md")
    assert doc.problems == []
    assert doc.to_bytes() == text.encode()


def test_human_formatting_is_understood() -> None:
    doc = SectionDoc(TOLERATED[3], "users/alice.md")
    assert list(doc.items()) == [("diet", "preference", "vegetarian"), ("diet", "allergy", "peanuts: severe")]
    doc = SectionDoc(TOLERATED[6], "users/alice.md")
    assert doc.get("DIET", "Preference") == "vegetarian"  # names compare case-insensitively


def test_malformed_lines_are_reported_as_file_line_reason() -> None:
    text = (
        "- orphan: no section yet\n"  # 1
        "## diet\n"  # 2
        "- preference: vegetarian\n"  # 3
        "just some prose\n"  # 4
        "- no colon here\n"  # 5
        "- preference: vegan\n"  # 6 duplicate key
        "## Diet\n"  # 7 duplicate section (case-insensitive)
        "- other: x\n"  # 8 (inside the ignored duplicate section: not reported again)
        "## bad/name\n"  # 9
        "- : empty key\n"  # 10 (section invalid: skipped)
        "## ok\n"  # 11
        "- : empty key\n"  # 12
        "- bell: ring\x07\n"  # 13
    )
    doc = SectionDoc(text, "users/alice.md")
    got = {p.line: str(p) for p in doc.problems}
    assert sorted(got) == [1, 4, 5, 6, 7, 9, 12, 13]
    assert got[1].startswith("users/alice.md:1: '- key: value' line outside a section")
    assert got[4] == (
        "users/alice.md:4: expected a '## section' heading, a '- key: value' line, a comment or a blank line"
    )
    assert "no ':'" in got[5]
    assert "duplicate key 'preference' in section 'diet' (first at line 3)" in got[6]
    assert "duplicate section 'Diet' (first at line 2)" in got[7]
    assert "may not contain '/'" in got[9]
    assert "key is empty" in got[12]
    assert "U+0007" in got[13]
    assert doc.get("diet", "preference") == "vegetarian"  # the first value counts, the rest is still served
    assert doc.to_bytes() == text.encode()  # and nothing is lost


def test_invalid_utf8_is_reported_with_line_and_byte() -> None:
    data = b"## diet\n- preference: veg\xffetarian\n- drink: tea\n"
    doc = SectionDoc.from_bytes(data, "users/alice.md")
    assert [str(p) for p in doc.problems] == ["users/alice.md:2: not valid UTF-8 (byte 0xff at column 18)"]
    assert doc.get("diet", "drink") == "tea"
    assert doc.to_bytes() == data


def test_an_unclosed_comment_is_a_problem() -> None:
    doc = SectionDoc("## a\n- k: v\n<!-- open\n- x: y\n", "scene.md")
    assert [p.reason for p in doc.problems] == ["comment '<!--' is not closed with '-->'"]


def test_edits_touch_only_the_lines_they_concern() -> None:
    text = (
        "\ufeff# alice\r\n\r\n<!-- keep me -->\r\n## diet\r\n*   preference :  vegetarian\r\n\r\n"
        "## mug\r\n+ colour: blue\r\n"
    )
    doc = SectionDoc(text, "users/alice.md")
    doc.set("diet", "preference", "vegan")
    doc.set("mug", "size", "large")
    doc.set("bread", "type", "rye")
    assert doc.render() == (
        "\ufeff# alice\r\n\r\n<!-- keep me -->\r\n## diet\r\n*   preference :  vegan\r\n\r\n## mug\r\n"
        "+ colour: blue\r\n+ size: large\r\n\r\n## bread\r\n- type: rye\r\n"
    )
    doc.remove("mug", "colour")
    doc.remove("mug", "size")  # an emptied section loses its heading
    doc.remove("bread", "type")  # also when it is the last one
    assert doc.render() == "\ufeff# alice\r\n\r\n<!-- keep me -->\r\n## diet\r\n*   preference :  vegan\r\n"


def test_a_new_section_in_a_file_without_final_newline() -> None:
    doc = SectionDoc("## a\n- x: 1", "users/u.md")
    doc.set("b", "y", "2")
    assert doc.render() == "## a\n- x: 1\n\n## b\n- y: 2\n"


def test_scene_locations_and_times() -> None:
    text = (
        "# Scene memory\n\n## kitchen_counter\n- contents: carrot under pink_cover, plate\n"
        "- observed: 2026-11-30T09:00:00.25Z\n- source: judge:observe:s2\n- description: where food is kept\n"
        "\n## shelf\n- contents:\n- observed: never\n\n## table\n- observed: yesterday\n"
    )
    doc = SectionDoc(text, "scene.md")
    found, problems = locations(doc)
    assert [str(p) for p in problems] == ["scene.md:14: observed 'yesterday': expected an ISO 8601 time"]
    assert found[0] == Location(
        "kitchen_counter",
        ("carrot under pink_cover", "plate"),
        parse_time("2026-11-30T09:00:00.25Z"),
        "judge:observe:s2",
    )
    assert found[1] == Location("shelf", (), 0.0, "")
    assert format_time(found[0].observed_s) == "2026-11-30T09:00:00.25Z"
    assert format_time(0.0) == "never"
    assert parse_time(format_time(1700000000.123456)) == pytest.approx(1700000000.123456, abs=1e-6)


def test_rendering_is_deterministic_grouped_and_marks_temporary_facts() -> None:
    facts = [Fact("mug", "colour", "blue"), Fact("Diet", "preference", "vegetarian"), Fact("diet", "allergy", "nuts")]
    temporary = [Fact("diet", "preference", "vegan", durable=False), Fact("drink", "wish", "tea", durable=False)]
    scene = [Location("table", (), 0.0, "initial"), Location("counter", ("carrot under cover", "plate"), 1.5, "judge")]
    first = render_context("alice", facts, temporary, scene)
    assert first == render_context("alice", list(reversed(facts)), list(reversed(temporary)), list(reversed(scene)))
    assert first == (
        "## User memory: alice\n"
        "### diet\n- allergy: nuts\n"
        "- preference: vegan (temporary, this request only; remembered: vegetarian)\n"
        "### drink\n- wish: tea (temporary, this request only)\n"
        "### mug\n- colour: blue\n"
        "## Scene memory\n"
        "- counter: carrot under cover, plate (observed 1970-01-01T00:00:01.5Z by judge)\n"
        "- table: (empty) (not observed yet, from initial)\n"
    )
    assert render_context("", facts, (), scene).startswith("## Scene memory\n")
    assert estimate_tokens("x" * 9) == 3
