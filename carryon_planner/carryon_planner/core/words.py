"""Words of names, as the food knowledge and the taxonomy match them: lower-case ASCII words
(`tokens`), their singular forms, and phrase tables matched longest first."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-case words, accents dropped: `gluten_free_soba` -> [gluten, free, soba];
    "jamón" -> [jamon]."""
    plain = unicodedata.normalize("NFKD", text.lower().replace("_", " "))
    return _TOKEN.findall("".join(c for c in plain if not unicodedata.combining(c)))


def singular_forms(word: str) -> list[str]:
    """A word and its singular forms (tomatoes -> tomatoe, tomato; berries -> berry)."""
    out = [word]
    if word.endswith("ies") and len(word) > 4:
        out.append(word[:-3] + "y")
    if word.endswith("ves") and len(word) > 4:
        out.append(word[:-3] + "f")
    if word.endswith("es") and len(word) > 3:
        out.append(word[:-2])
    if word.endswith("s") and not word.endswith("ss") and len(word) > 2:
        out.append(word[:-1])
    return out


def reachable(starts: Iterable[str], edges: Mapping[str, Iterable[str]]) -> set[str]:
    """`starts` and everything their `edges` lead to, at any depth."""
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return seen


@dataclass
class Phrases:
    """Phrases (token tuples) -> values, matched longest first, the last word in any number."""

    table: dict[tuple[str, ...], list[Any]] = field(default_factory=dict)
    longest: int = 1

    def add(self, phrase: str, value: Any) -> None:
        key = tuple(tokens(phrase))
        if key:
            self.table.setdefault(key, []).append(value)
            self.longest = max(self.longest, len(key))

    def at(self, words: list[str], i: int) -> tuple[int, list[Any]]:
        """(size, values) of the longest phrase starting at words[i]; (0, []) when none."""
        for size in range(min(self.longest, len(words) - i), 0, -1):
            *head, last = words[i : i + size]
            for form in singular_forms(last):
                found = self.table.get((*head, form))
                if found:
                    return size, found
        return 0, []

    def every(self, words: list[str], i: int) -> list[tuple[int, list[Any]]]:
        """(size, values) of every phrase starting at words[i], longest first."""
        out = []
        for size in range(min(self.longest, len(words) - i), 0, -1):
            *head, last = words[i : i + size]
            found = next((f for form in singular_forms(last) if (f := self.table.get((*head, form)))), None)
            if found:
                out.append((size, found))
        return out
