"""Markdown section blocks with `- key: value` lines (paper §B.1), edited losslessly.

A memory file is a list of lines; the parser classifies each one and the editor changes
only the lines a change concerns. So a file loaded and saved without a change is
byte-identical (line endings, bullets, spacing, comments and a byte-order mark
included), and a hand-edited file keeps its formatting when the store updates a fact.

Grammar (one construct per line; CRLF and LF both accepted):

    # Any title                 level-1 heading: a title; it also ends a section
    ## diet                     level 2-6 heading: starts the section of that entity
    - preference: vegetarian    `-`, `*` or `+` bullet, key, `:`, value (value may hold `:`)
    <!-- a comment -->          HTML comments (also over several lines) and `> quotes`
                                blank lines

Anything else is malformed and reported as `file:line: reason`, as are a fact outside a
section, a duplicate section or key (compared case-insensitively; the first one counts)
and invalid names. Malformed lines are left out of what is served; a file with
problems is never rewritten by a normal write (the store refuses, see `MemoryStore`)
until `carryon memory repair` (core/repair.py) or a person fixes it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from carryon_memory.core import validate
from carryon_memory.core.errors import InvalidArgument
from carryon_memory.core.types import Problem

# The line grammar (also read by core/repair.py, which must classify lines as this parser does).
HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
_CLOSING_HASHES = re.compile(r"[ \t]+#+$")
BULLET = re.compile(r"^([ \t]*[-*+][ \t]+)(.*)$")
# What surrogateescape makes of an undecodable byte; searched in C (a loop over every character
# in Python was most of the cost of parsing a file).
_UNDECODED = re.compile("[\udc80-\udcff]")
EXPECTED = "expected a '## section' heading, a '- key: value' line, a comment or a blank line"


def _written(raw: str, name: str) -> str:
    """How a name is written when that differs from how it reads (invisible characters, a
    trailing ` #`): two headings that look different, or identical, read as one name."""
    return f"; this one is written {raw!r}, which reads as {name!r}" if raw.strip() != name else ""


def _key_value(key: str, value: str) -> str:
    return f"{key}: {value}" if value else f"{key}:"


def fold(name: str) -> str:
    """How entity, location and key names are compared (case-insensitive)."""
    return name.casefold()


@dataclass(frozen=True)
class Entry:
    """One `- key: value` line. line: 0-based index; value_col: where the value starts."""

    key: str
    value: str
    line: int
    value_col: int


@dataclass
class Section:
    """A heading and the entries below it. end: index of the first line after the section."""

    name: str
    heading: int
    end: int
    entries: dict[str, Entry] = field(default_factory=dict)  # by fold(key), in file order


def decode(data: bytes, file: str) -> tuple[str, list[Problem]]:
    """UTF-8 text of a file; undecodable bytes are kept (surrogateescape) and reported per line."""
    text = data.decode("utf-8", errors="surrogateescape")
    problems = []
    if _UNDECODED.search(text):
        for number, line in enumerate(text.split("\n"), start=1):
            found = _UNDECODED.search(line)
            if found is not None:
                bad = found.start()
                byte = ord(line[bad]) - 0xDC00
                problems.append(Problem(file, number, f"not valid UTF-8 (byte 0x{byte:02x} at column {bad + 1})"))
    return text, problems


class SectionDoc:
    """A parsed memory file that can be changed line by line and rendered back.

    `problems` lists malformed lines; `sections` maps fold(name) to the section (the
    first one of that name).
    """

    def __init__(self, text: str, file: str, *, decode_problems: list[Problem] | None = None) -> None:
        self.file = file
        self.lines = text.split("\n")  # a trailing "\n" leaves a final "" that keeps it on render
        self._decode_problems = list(decode_problems or [])
        self.sections: dict[str, Section] = {}
        self.problems: list[Problem] = []
        self._parse()

    @classmethod
    def from_bytes(cls, data: bytes, file: str) -> SectionDoc:
        text, problems = decode(data, file)
        return cls(text, file, decode_problems=problems)

    def render(self) -> str:
        return "\n".join(self.lines)

    def to_bytes(self) -> bytes:
        return self.render().encode("utf-8", errors="surrogateescape")

    # -- parsing ----------------------------------------------------------------
    def _problem(self, index: int, reason: str) -> None:
        self.problems.append(Problem(self.file, index + 1, reason))

    def _parse(self) -> None:
        self.sections = {}
        self.problems = list(self._decode_problems)
        bad_lines = {p.line - 1 for p in self._decode_problems}
        current: Section | None = None
        skipping = False  # inside a section whose heading was invalid or duplicate
        in_comment = False
        for index, raw in enumerate(self.lines):
            line = raw[:-1] if raw.endswith("\r") else raw
            if index == 0:
                line = line.removeprefix("\ufeff")
            if index in bad_lines:
                continue
            stripped = line.strip()
            if in_comment:
                in_comment = "-->" not in stripped
                continue
            if not stripped or stripped.startswith(">"):
                continue
            if stripped.startswith("<!--"):
                in_comment = "-->" not in stripped[4:]
                continue
            heading = HEADING.match(line)
            if heading:
                if current is not None:
                    current.end = index
                current, skipping = None, False
                if len(heading.group(1)) == 1:
                    continue  # a title
                name = _CLOSING_HASHES.sub("", heading.group(2) or "").strip()
                try:
                    name = validate.entity(name)  # normalised: the name a write would use
                except InvalidArgument as exc:
                    self._problem(index, f"section heading: {exc}")
                    skipping = True
                    continue
                first = self.sections.get(fold(name))
                if first is not None:
                    where = f"first at line {first.heading + 1}{_written(heading.group(2) or '', name)}"
                    self._problem(index, f"duplicate section {name!r} ({where}); its lines are ignored")
                    skipping = True
                    continue
                current = Section(name=name, heading=index, end=len(self.lines))
                self.sections[fold(name)] = current
                continue
            bullet = BULLET.match(line)
            if not bullet:
                self._problem(index, EXPECTED)
                continue
            if skipping:
                continue
            if current is None:
                self._problem(index, "'- key: value' line outside a section (add a '## name' heading above it)")
                continue
            body = bullet.group(2)
            written, colon, rest = body.partition(":")
            if not colon:
                self._problem(index, f"expected '- key: value', found no ':' in {body.strip()[:40]!r}")
                continue
            try:
                key = validate.key(written)
            except InvalidArgument as exc:
                self._problem(index, str(exc))
                continue
            bad = validate.bad_character(rest.replace("\t", " "))
            if bad:
                self._problem(index, f"value of {key!r}: {bad}")
                continue
            previous = current.entries.get(fold(key))
            if previous is not None:
                where = f"first at line {previous.line + 1}{_written(written.strip(), key)}"
                self._problem(index, f"duplicate key {key!r} in section {current.name!r} ({where})")
                continue
            value_col = len(bullet.group(1)) + len(body) - len(rest) + (len(rest) - len(rest.lstrip()))
            current.entries[fold(key)] = Entry(key=key, value=rest.strip(), line=index, value_col=value_col)
        if in_comment:
            self.problems.append(Problem(self.file, len(self.lines), "comment '<!--' is not closed with '-->'"))
        self.problems.sort(key=lambda p: p.line)

    # -- reading ----------------------------------------------------------------
    def get(self, section: str, key: str) -> str | None:
        found = self.sections.get(fold(section))
        entry = found.entries.get(fold(key)) if found else None
        return entry.value if entry else None

    def items(self) -> Iterator[tuple[str, str, str]]:
        """(section, key, value) of every well-formed entry, in file order."""
        for section in self.sections.values():
            for entry in section.entries.values():
                yield section.name, entry.key, entry.value

    # -- editing ----------------------------------------------------------------
    def _cr(self, index: int) -> str:
        """The line ending style near `index` ("\\r" for CRLF files)."""
        if 0 <= index < len(self.lines) and self.lines[index].endswith("\r"):
            return "\r"
        return "\r" if any(line.endswith("\r") for line in self.lines[:3]) else ""

    def set(self, section: str, key: str, value: str) -> None:
        """Set `key` in `section` (both created when missing). Inputs must be validated.
        A change that would leave a line the parser rejects (a duplicate section, a name it
        reads differently) is undone and raises InvalidArgument: a file is never written
        in a form that would make it read-only."""
        before, problems = list(self.lines), {p.reason for p in self.problems}
        self._set(section, key, value)
        new = next((p for p in self.problems if p.reason not in problems), None)
        if new is not None or fold(section) not in self.sections:
            self.lines = before
            self._parse()
            why = f"{new.file}:{new.line}: {new.reason}" if new else f"section {section!r} would not read back"
            raise InvalidArgument(f"setting {section}.{key} would make the file malformed ({why}); nothing was changed")

    def _set(self, section: str, key: str, value: str) -> None:
        found = self.sections.get(fold(section))
        entry = found.entries.get(fold(key)) if found else None
        if found is not None and entry is not None:
            raw = self.lines[entry.line]
            cr = "\r" if raw.endswith("\r") else ""
            head = raw[: entry.value_col]
            if not entry.value or not value:
                head = head.rstrip(" \t")
            if head.endswith(":") and value:
                head += " "
            self.lines[entry.line] = f"{head}{value}{cr}"
        elif found is not None:
            last = max((e.line for e in found.entries.values()), default=found.heading)
            bullet = "- "
            if found.entries:
                tail = next(reversed(found.entries.values()))
                match = BULLET.match(self.lines[tail.line])
                bullet = match.group(1) if match else bullet
            self.lines.insert(last + 1, f"{bullet}{_key_value(key, value)}{self._cr(last)}")
        else:
            end = len(self.lines)
            while end > 0 and not self.lines[end - 1].strip():
                end -= 1
            cr = self._cr(end - 1)
            block = [f"## {section}{cr}", f"- {_key_value(key, value)}{cr}"]
            if end > 0:
                block.insert(0, cr)
            if end == len(self.lines):
                block.append("")  # the file had no final newline: a changed file gets one
            self.lines[end:end] = block
        self._parse()

    def remove(self, section: str, key: str) -> None:
        """Remove `key` from `section`; a section left empty loses its heading too."""
        found = self.sections[fold(section)]
        entry = found.entries[fold(key)]
        del self.lines[entry.line]
        self._parse()
        found = self.sections[fold(section)]
        if found.entries or any(line.strip() for line in self.lines[found.heading + 1 : found.end]):
            return
        if any(line.strip() for line in self.lines[found.end :]):
            del self.lines[found.heading : found.end]  # a section follows: drop heading + its blank lines
        else:  # the last section: also drop the blank lines before it, keep the final newline
            start = found.heading
            while start > 0 and not self.lines[start - 1].strip():
                start -= 1
            final = [""] if self.lines and self.lines[-1] == "" else []
            self.lines[start:] = final
        self._parse()

    def set_title_if_new(self, title: str) -> None:
        """Give an empty document a `# title` line."""
        if not any(line.strip() for line in self.lines):
            self.lines = [f"# {title}", ""]
            self._parse()
