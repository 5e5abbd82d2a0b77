"""Repair of read-only memory files (`carryon memory repair`), losing nothing.

A memory file with problems (core/markdown.py) is never rewritten by a normal write.
`plan_repair` turns it into one that parses with no problems, changing only what it must:

* **Duplicate sections** (also headings that differ only by case, invisible characters
  such as a zero-width space, or a trailing ` #`) merge into the first section of that
  name: the later section's lines move to the end of it.
* **A key set twice** in a section (after merging) keeps its **last** value (the later
  line was written later: an old version of the store appended a section on every
  write); each earlier line is set aside as superseded, and the repair says so.
* **Names** of headings and keys are rewritten normalised (`validate.normalise`).
* **Lines that are not memory** (prose, a bullet without `:` or outside a section, an
  invalid name, a control character or NUL, invalid UTF-8, a user fact without a value,
  a scene `observed` that is not a time, the facts under a heading that is not a valid
  name) are **set aside**: taken out of the data and copied, with their line number
  before the repair and the reason, into one HTML comment at the end of the file, with
  unprintable characters escaped (`\\x00`, `\\xff` for an undecodable byte, `\\u200b`,
  and `--\\>` so the comment does not end early).
* **A comment left open** (`<!--` with no `-->`) is closed at the end of the file.

Everything else stays as it was. The whole file as it was is the `before` snapshot of
the repair's journal entry: `repair` writes through the store's transaction (write lock,
journal op "repair", atomic replace, safe while memory_node runs) and `restore` of
`RepairResult.undo_version` undoes it. `plan_folder` is the dry run. A result that would
still have problems raises `RepairError` and nothing is written.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from carryon_common.core.durable import read_bytes
from carryon_memory.core import validate
from carryon_memory.core.errors import InvalidArgument, NotFound, RepairError
from carryon_memory.core.files import USERS_DIR, load_file, user_file, valid_file
from carryon_memory.core.journal import sha256
from carryon_memory.core.markdown import BULLET, EXPECTED, HEADING, decode, fold
from carryon_memory.core.scene import OBSERVED, SCENE_FILE, format_time, parse_time
from carryon_memory.core.store import MemoryStore
from carryon_memory.core.types import Change, Problem

REPAIR_OP = "repair"  # journal op of a repair
# Shown escaped in the set-aside comment: control and line-separator characters, bidirectional
# controls, invisible characters, the byte-order mark and undecodable bytes (surrogateescape).
_ESCAPED = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\udc80-\udcff]")
_BOM = "\ufeff"


class FixKind(enum.Enum):
    MERGED = "merged"  # a duplicate section merged into the first section of that name
    SUPERSEDED = "superseded"  # an earlier value of a key, replaced by a later one and set aside
    RENAMED = "renamed"  # a heading or key written in its normalised form
    SET_ASIDE = "set aside"  # a line that is not memory, moved into the comment at the end
    CLOSED = "closed"  # a comment that was never closed, closed at the end of the file


@dataclass(frozen=True)
class Fix:
    """One change a repair makes. line: 1-based, in the file before the repair."""

    file: str
    line: int
    kind: FixKind
    detail: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.kind.value}: {self.detail}"


@dataclass(frozen=True)
class FileRepair:
    """The repair of one file: the problems that made it read-only, the fixes, and its
    bytes before and after (the same bytes when it had no problems)."""

    file: str
    problems: tuple[Problem, ...]
    fixes: tuple[Fix, ...]
    before: bytes
    after: bytes

    @property
    def changed(self) -> bool:
        return self.after != self.before


@dataclass(frozen=True)
class RepairResult:
    """What `repair` did: every file looked at, the journal entries written, and the
    version whose files are those before the repair (0 = none: the repair is version 1)."""

    files: tuple[FileRepair, ...]
    changes: tuple[Change, ...]
    undo_version: int


def escape(text: str) -> str:
    """`text` with the characters of `_ESCAPED` written as `\\xNN` / `\\uNNNN`, so it can be read."""

    def one(match: re.Match[str]) -> str:
        code = ord(match.group())
        code -= 0xDC00 if 0xDC80 <= code <= 0xDCFF else 0  # an undecodable byte
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return _ESCAPED.sub(one, text)


@dataclass
class _Line:
    index: int  # 0-based, in the file before the repair
    text: str  # as it will be written, without its "\r"
    cr: str  # "\r" for a CRLF line
    key: str = ""  # the key of a fact line (normalised)
    written: str = ""  # that key as written
    value: str = ""
    aside: str = ""  # why it is set aside ("" = kept)

    def __post_init__(self) -> None:
        self.original = self.text  # what the set-aside comment shows


@dataclass
class _Block:
    """The lines from one heading to the next; name "" = not a section (top of the file,
    after a title, or under a heading that is set aside: `invalid` is then its line)."""

    heading: _Line | None
    name: str = ""
    written: str = ""  # the heading's name as written
    invalid: int = 0
    lines: list[_Line] = field(default_factory=list)


def _blank(line: _Line) -> bool:
    return not line.text.strip()


class _Rebuild:
    """Classifies every line as SectionDoc._parse does, then merges, renames and sets aside."""

    def __init__(self, rel: str, data: bytes) -> None:
        self.rel = rel
        self.scene = rel == SCENE_FILE
        self.fixes: list[Fix] = []
        self.aside: list[_Line] = []
        text, undecodable = decode(data, rel)
        lines = text.split("\n")
        self.final_newline = len(lines) > 1 and lines[-1] == ""
        if self.final_newline:
            lines.pop()
        self.bom = lines[0].startswith(_BOM)
        lines[0] = lines[0].removeprefix(_BOM)
        self.cr = "\r" if any(line.endswith("\r") for line in lines[:3]) else ""
        self.blocks = self._classify(lines, {p.line - 1: p.reason for p in undecodable})
        self._merge()

    def _fix(self, index: int, kind: FixKind, detail: str) -> None:
        self.fixes.append(Fix(self.rel, index + 1, kind, detail))

    def _set_aside(self, line: _Line, why: str) -> None:
        line.aside = why
        self.aside.append(line)
        self._fix(line.index, FixKind.SET_ASIDE, why)

    # -- classifying -----------------------------------------------------------------
    def _classify(self, lines: list[str], undecodable: dict[int, str]) -> list[_Block]:
        blocks = [_Block(None)]
        in_comment, opened = False, 0
        for index, raw in enumerate(lines):
            cr = "\r" if raw.endswith("\r") else ""
            item = _Line(index, raw[: len(raw) - len(cr)], cr)
            stripped = item.text.strip()
            heading = HEADING.match(item.text)
            if index in undecodable:
                self._set_aside(item, undecodable[index])
                if heading and len(heading.group(1)) > 1 and not in_comment:
                    # Its facts are not the previous section's: they are set aside with it.
                    blocks.append(_Block(None, invalid=index + 1))
                continue
            if in_comment:
                in_comment = "-->" not in stripped
            elif stripped.startswith("<!--"):
                in_comment, opened = "-->" not in stripped[4:], index
            elif heading:
                blocks.append(self._heading(item, heading))
                continue
            elif stripped and not stripped.startswith(">"):
                self._fact(blocks[-1], item)
            if not item.aside:
                blocks[-1].lines.append(item)
        if in_comment:
            blocks[-1].lines.append(_Line(len(lines), "-->", self.cr))
            self._fix(opened, FixKind.CLOSED, "this comment was never closed: '-->' added at the end of the file")
        return blocks

    def _heading(self, item: _Line, match: re.Match[str]) -> _Block:
        hashes, written = match.group(1), match.group(2) or ""
        if len(hashes) == 1:
            return _Block(item)  # a title: it ends a section and starts none
        try:
            name = validate.entity(written)
        except InvalidArgument as exc:
            self._set_aside(item, f"section heading: {exc}")
            return _Block(None, invalid=item.index + 1)
        if written != name:
            item.text = f"{hashes} {name}"
        return _Block(item, name, written)

    def _fact(self, block: _Block, item: _Line) -> None:
        bullet = BULLET.match(item.text)
        if bullet is None:
            self._set_aside(item, EXPECTED)
            return
        if block.invalid:
            self._set_aside(item, f"a fact under the heading of line {block.invalid}, which is set aside")
            return
        if not block.name:
            self._set_aside(item, "a '- key: value' line outside a section")
            return
        written, colon, rest = bullet.group(2).partition(":")
        if not colon:
            self._set_aside(item, f"no ':' between key and value in {bullet.group(2).strip()[:40]!r}")
            return
        try:
            key = validate.key(written)
        except InvalidArgument as exc:
            self._set_aside(item, str(exc))
            return
        value = rest.strip()
        bad = validate.bad_character(rest.replace("\t", " "))
        if bad:
            self._set_aside(item, f"value of {key!r}: {bad}")
        elif not value and not self.scene:
            self._set_aside(item, f"{key!r} has no value")
        elif self.scene and fold(key) == OBSERVED and not _is_time(value):
            self._set_aside(item, f"observed {value!r}: expected an ISO 8601 time")
        else:
            item.key, item.written, item.value = key, written.strip(), value
            if item.written != key:
                item.text = f"{bullet.group(1)}{key}:{rest}"

    # -- merging ---------------------------------------------------------------------
    def _merge(self) -> None:
        kept: list[_Block] = []
        sections: dict[str, _Block] = {}
        for block in self.blocks:
            first = sections.get(fold(block.name)) if block.name else None
            if first is None:
                if block.name and block.heading is not None:
                    sections[fold(block.name)] = block
                    if block.written != block.name:
                        detail = f"heading {block.written!r} is now written {block.name!r}"
                        self._fix(block.heading.index, FixKind.RENAMED, detail)
                kept.append(block)
                continue
            assert block.heading is not None and first.heading is not None
            self._fix(
                block.heading.index,
                FixKind.MERGED,
                f"section {block.written!r} is {first.name!r} again: its lines moved to the end of the section at "
                f"line {first.heading.index + 1}, its values win",
            )
            moved = list(block.lines)
            while moved and _blank(moved[0]):
                moved.pop(0)
            while moved and _blank(moved[-1]):
                moved.pop()
            at = len(first.lines)
            while at > 0 and _blank(first.lines[at - 1]):
                at -= 1
            first.lines[at:at] = moved
        for section in sections.values():
            last = {fold(line.key): line for line in section.lines if line.key}
            for line in [line for line in section.lines if line.key and last[fold(line.key)] is not line]:
                later = last[fold(line.key)]
                section.lines.remove(line)
                line.aside = f"superseded by line {later.index + 1}, a later value of {section.name}.{line.key}"
                self.aside.append(line)
                self._fix(
                    line.index,
                    FixKind.SUPERSEDED,
                    f"{section.name}.{line.key} was {line.value!r}; the later {later.value!r} of line "
                    f"{later.index + 1} wins",
                )
            for line in section.lines:
                if line.key and line.written != line.key:
                    self._fix(line.index, FixKind.RENAMED, f"key {line.written!r} is now written {line.key!r}")
        self.blocks = kept

    # -- writing ---------------------------------------------------------------------
    def render(self, now: float) -> bytes:
        texts = []
        for block in self.blocks:
            if block.heading is not None:
                texts.append(block.heading.text + block.heading.cr)
            texts.extend(line.text + line.cr for line in block.lines)
        final_newline = self.final_newline
        if self.aside:
            while texts and not texts[-1].strip():
                texts.pop()
            if texts:
                texts.append(self.cr)
            texts.append(
                f"<!-- Set aside by `carryon memory repair` at {format_time(float(int(now)))}: lines kept out of "
                "the memory, with their line number before the repair and why (unprintable characters escaped). "
                f"The whole file as it was stays in the memory history (`carryon memory restore`).{self.cr}"
            )
            for line in sorted(self.aside, key=lambda line: line.index):
                for shown in (f"line {line.index + 1}: {line.aside}:", f"    {line.original}"):
                    texts.append(escape(shown).replace("-->", "--\\>") + self.cr)  # it would end the comment
            texts.append(f"-->{self.cr}")
            final_newline = True
        text = "\n".join(texts) + ("\n" if final_newline and texts else "")
        return ((_BOM if self.bom else "") + text).encode("utf-8", errors="surrogateescape")


def _is_time(text: str) -> bool:
    try:
        parse_time(text)
    except ValueError:
        return False
    return True


def plan_repair(rel: str, data: bytes, now: float) -> FileRepair:
    """The repair of the memory file `rel` (scene.md or users/<id>.md) whose bytes are
    `data`; `now` (seconds since the epoch) stamps the set-aside comment. A file with no
    problems is left as it is. RepairError when the result would still have problems."""
    problems = load_file(rel, data).problems
    if not problems:
        return FileRepair(rel, (), (), data, data)
    rebuild = _Rebuild(rel, data)
    after = rebuild.render(now)
    left = load_file(rel, after).problems
    if left:
        shown = "; ".join(str(p) for p in left[:3])
        raise RepairError(f"{rel}: a repair would still leave problems ({shown}); nothing was changed")
    fixes = sorted(rebuild.fixes, key=lambda fix: fix.line)
    return FileRepair(rel, problems, tuple(fixes), data, after)


def memory_files(root: Path) -> list[str]:
    """scene.md (when it exists) and users/<id>.md of every valid user id, sorted."""
    users = root / USERS_DIR
    ids = sorted(p.stem for p in users.glob("*.md") if validate.USER_ID.fullmatch(p.stem)) if users.is_dir() else []
    return ([SCENE_FILE] if (root / SCENE_FILE).is_file() else []) + [user_file(i) for i in ids]


def _check(files: Sequence[str]) -> list[str]:
    for rel in files:
        if not valid_file(rel):
            raise InvalidArgument(f"file {rel!r}: expected 'scene.md' or 'users/<user_id>.md'")
    return list(dict.fromkeys(files))


def plan_folder(root: Path, files: Sequence[str], now: float) -> list[FileRepair]:
    """The dry run of `repair`: what it would do to each file as it is now. Writes nothing
    (not even the lock file); NotFound for a file that does not exist."""
    plans = []
    for rel in _check(files):
        data = read_bytes(root / rel)
        if data is None:
            raise NotFound(f"{rel} does not exist in {root}")
        plans.append(plan_repair(rel, data, now))
    return plans


def repair(store: MemoryStore, files: Sequence[str], now: float, source: str = REPAIR_OP) -> RepairResult:
    """Repair `files` (paths relative to the memory folder) in one transaction: under the
    write lock, from the files as they are then, journalled as op "repair" with `source`.
    A file edited by hand since the journal last wrote it first gets an op "edit" entry with
    the content found, so `restore(result.undo_version)` brings every file back exactly as
    it was. All or nothing: NotFound for a missing file, RepairError when one cannot be
    repaired."""
    source = validate.source(source)
    with store.transaction() as txn:
        plans, edits = [], 0
        for rel in _check(files):
            data = txn.read(rel)
            if data is None:
                raise NotFound(f"{rel} does not exist in {store.root}")
            plan = plan_repair(rel, data, now)
            plans.append(plan)
            known, sha = store.journal.state_at(rel, store.journal.version)
            if plan.changed and known and sha != sha256(data):
                before = None if sha is None else store.journal.snapshot(sha)
                txn.record_edit(rel, before, source=f"{source}: as found, edited outside the store")
                edits += 1
        for plan in plans:
            if plan.changed:
                txn.record(plan.file, REPAIR_OP, source=source, after=plan.after)
        changes = txn.commit(now)
    return RepairResult(tuple(plans), tuple(changes), changes[0].version - 1 + edits if changes else 0)
