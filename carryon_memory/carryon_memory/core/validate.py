"""Validation of everything that becomes a file name or a line of a memory file.

Memory files are line-oriented Markdown and user ids become file names, so:
* user ids are `^[a-z0-9][a-z0-9_-]{0,63}$` — lower case so `Alice` and `alice` can
  never be two files on one disk and the same file on another; no dots, so no `..`,
  no hidden files and no extension tricks; no separators, so no path traversal;
* entity, key, location and item names: 1-64 characters (items 1-128), no path
  separators, no control / line-separator / bidirectional-override characters, no
  leading `#`, `-`, `*`, `+`, `>` or `<` (which would change the Markdown meaning);
  keys also no `:` (the key/value separator), items no `,` (the contents separator);
* values: at most `max_value_chars`, no control or line-separator characters.
Names are normalised before the checks (`normalise`): Unicode NFC, invisible characters
(zero-width spaces and joiners, soft hyphens) removed, surrounding whitespace and a
trailing Markdown closing sequence (` #`) dropped, as the parser would drop them.
"""

from __future__ import annotations

import re
import unicodedata

from carryon_memory.core.errors import InvalidArgument

USER_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_NAME_CHARS = 64
MAX_ITEM_CHARS = 128
MAX_SOURCE_CHARS = 200
# Control characters (Unicode category Cc), line / paragraph separators (Zl, Zp), bidirectional
# overrides and marks, and the byte-order mark: each could break a line or disguise its text.
_BAD = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\ufeff]")
_MARKDOWN_LEADERS = ("#", "-", "*", "+", ">", "<")


def bad_character(text: str) -> str | None:
    """Describe the first character that may not appear in a memory line, or None."""
    found = _BAD.search(text)
    if found is None:
        return None
    return f"control character U+{ord(found.group()):04X} at position {found.start() + 1}"


def user_id(value: str) -> str:
    """A valid user id (the file users/<id>.md), else InvalidArgument saying why."""
    if USER_ID.fullmatch(value):
        return value
    shown = repr(value) if len(value) <= 80 else repr(value[:80]) + "..."
    hint = ""
    if value and USER_ID.fullmatch(value.lower()):
        hint = f" (did you mean {value.lower()!r}?)"
    raise InvalidArgument(
        f"user id {shown}: use 1-64 lower-case letters, digits, '_' or '-', starting with a letter or digit{hint}"
    )


# Characters that show nothing: two names that differ only in them would read the same
# (a zero-width space made two sections that both read "diet"). Removed from names.
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200d\u2060-\u2064\ufeff]")
# A Markdown heading's optional closing sequence (`## snack #`): the parser drops it, so a
# name ending in it would never be found again, and every write would add a new section.
_CLOSING_HASHES = re.compile(r"[ \t]+#+$")


def normalise(value: str) -> str:
    """How a name is stored: Unicode NFC, invisible characters removed, surrounding
    whitespace and a trailing ` #` sequence dropped (what the Markdown parser would drop)."""
    value = _INVISIBLE.sub("", unicodedata.normalize("NFC", value)).strip()
    while _CLOSING_HASHES.search(value):
        value = _CLOSING_HASHES.sub("", value).strip()
    return value


def _name(kind: str, value: str, max_chars: int, forbidden: str) -> str:
    if "\x00" in value:
        raise InvalidArgument(f"{kind} {value!r}: contains a NUL character")
    given, value = value, normalise(value)
    if not value:
        raise InvalidArgument(f"{kind} is empty" + (f" (given {given!r})" if given.strip() else ""))
    if len(value) > max_chars:
        raise InvalidArgument(f"{kind} {value[:40]!r}...: longer than {max_chars} characters")
    bad = bad_character(value)
    if bad:
        raise InvalidArgument(f"{kind} {value!r}: {bad}")
    for char in forbidden:
        if char in value:
            raise InvalidArgument(f"{kind} {value!r}: may not contain {char!r}")
    if value.startswith(_MARKDOWN_LEADERS):
        raise InvalidArgument(f"{kind} {value!r}: may not start with {value[0]!r} (Markdown syntax)")
    if value in (".", ".."):
        raise InvalidArgument(f"{kind} {value!r}: not a name")
    return value


def entity(value: str) -> str:
    """A valid entity (section) name of user memory."""
    return _name("entity", value, MAX_NAME_CHARS, "/\\")


def key(value: str) -> str:
    """A valid attribute name (the `key` of `- key: value`)."""
    return _name("key", value, MAX_NAME_CHARS, "/\\:")


def location(value: str) -> str:
    """A valid scene location name (a section of scene.md)."""
    return _name("location", value, MAX_NAME_CHARS, "/\\")


def item(value: str) -> str:
    """A valid scene item, e.g. `carrot under pink_cover` (no commas: they separate items)."""
    return _name("item", value, MAX_ITEM_CHARS, ",")


def value(text: str, max_chars: int) -> str:
    """A valid fact value (may be empty: an empty value removes the fact)."""
    text = text.strip()
    if len(text) > max_chars:
        raise InvalidArgument(f"value {text[:40]!r}...: {len(text)} characters, more than max_value_chars={max_chars}")
    bad = bad_character(text)
    if bad:
        raise InvalidArgument(f"value {text[:40]!r}: {bad} (memory files are one fact per line)")
    return text


def source(text: str) -> str:
    """Who made a change (recorded in the journal); empty becomes 'unknown'."""
    text = text.strip()
    if len(text) > MAX_SOURCE_CHARS:
        raise InvalidArgument(f"source {text[:40]!r}...: longer than {MAX_SOURCE_CHARS} characters")
    bad = bad_character(text)
    if bad:
        raise InvalidArgument(f"source {text[:40]!r}: {bad}")
    return text or "unknown"
