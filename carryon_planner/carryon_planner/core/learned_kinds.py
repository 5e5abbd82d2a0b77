"""Names the taxonomy does not know, classified once by the LLM (issue 20).

The curated taxonomy (core/taxonomy.py) places `turkey_slices` and `chorizo`; a name none
of whose words it lists (`prosciutto_crudo`, `bresaola`, `quorn_nuggets`) belongs to no
kind, so no diet or allergy could rule it out. Before a plan for a user with preference
facts, the object names of the scene and the library that the taxonomy cannot place are
sent to the planner's LLM once, with the taxonomy's kinds as the only allowed answers
(schema-constrained: a name is every kind it is or contains, or none); the answers are
added to the taxonomy as members of those kinds, and kept (in memory, and in `path` when
one is configured) so each name is asked once.

Failure is never silent and never unsafe: an LLM that is down or answers out of schema
leaves the names unknown (as before), reports why, and they are asked again next time. A
cache file that does not parse is set aside (`.corrupt`) and started anew. The LLM can only
add kinds: it can rule a name out, never clear one the curated table rules out.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from carryon_common.core.durable import atomic_write
from carryon_common.core.llm import ChatMessage, LlmClient, LlmError
from carryon_planner.core.taxonomy import Taxonomy

MAX_NAMES_PER_REQUEST = 24
_SYSTEM = (
    "You classify object names for a household robot that must respect its users' diets and allergies. "
    "For each name, list every kind from the allowed kinds that the object is or contains (prosciutto: pork, "
    "meat; a cheese sandwich: lactose, dairy, gluten). A name that is none of them (a bowl, a cover, a laptop, a "
    "carrot) gets an empty list. Answer with JSON only."
)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    kinds: list[str] = Field(max_length=8)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    names: list[_Entry]


def kinds_schema(names: list[str], kinds: list[str]) -> dict[str, Any]:
    """The answer's JSON Schema: the asked names and the taxonomy's kinds as enums."""
    entry = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "enum": names},
            "kinds": {"type": "array", "items": {"type": "string", "enum": kinds}, "maxItems": 8},
        },
        "required": ["name", "kinds"],
        "additionalProperties": False,
    }
    return {
        "title": "NameKinds",
        "type": "object",
        "properties": {"names": {"type": "array", "items": entry, "maxItems": len(names)}},
        "required": ["names"],
        "additionalProperties": False,
    }


class LearnedKinds:
    """name -> kinds the LLM gave it, for names the taxonomy does not know. Thread safe."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.problems: list[str] = []
        self._known: dict[str, tuple[str, ...]] = self._load()

    @property
    def known(self) -> dict[str, tuple[str, ...]]:
        with self._lock:
            return dict(self._known)

    def unknown(self, names: Iterable[str], taxonomy: Taxonomy) -> list[str]:
        """The names neither the taxonomy nor an earlier answer places (sorted)."""
        with self._lock:
            return sorted({n for n in names if n and n not in self._known and not taxonomy.kinds_of(n)})

    def learn(self, llm: LlmClient, names: Iterable[str], taxonomy: Taxonomy) -> list[str]:
        """Ask `llm` about the names `taxonomy` does not know; what happened, one line each."""
        todo = self.unknown(names, taxonomy)[:MAX_NAMES_PER_REQUEST]
        if not todo:
            return []
        kinds = sorted(taxonomy.kinds)
        listed = "\n".join(f"- {name}" for name in todo)
        messages = [
            ChatMessage("system", _SYSTEM),
            ChatMessage("user", f"Allowed kinds: {', '.join(kinds)}.\nNames:\n{listed}"),
        ]
        try:
            answer = _Answer.model_validate_json(llm.complete(messages, kinds_schema(todo, kinds)))
        except (LlmError, ValidationError, ValueError) as exc:
            return [f"names not classified (they stay unknown): {', '.join(todo)}: {exc}"[:400]]
        learned = {e.name: tuple(sorted(set(e.kinds) & set(kinds))) for e in answer.names if e.name in todo}
        with self._lock:
            self._known.update(learned)
            self._save()
        placed = [f"{n}: {', '.join(k)}" for n, k in sorted(learned.items()) if k]
        missing = sorted(set(todo) - set(learned))
        notes = [
            f"classified {len(learned)} name(s) the taxonomy does not know"
            + (f" ({'; '.join(placed)})" if placed else "")
        ]
        if missing:
            notes.append(f"the LLM did not classify {', '.join(missing)} (asked again next time)")
        return notes

    def taxonomy(self, base: Taxonomy) -> Taxonomy:
        """`base` with every learned name added as a member of its kinds."""
        with self._lock:
            learned = dict(self._known)
        if not any(learned.values()):
            return base
        kinds = {kind: list(members) for kind, members in base.kinds.items()}
        for name, of in learned.items():
            for kind in of:
                if kind in kinds and name not in kinds[kind]:
                    kinds[kind].append(name.replace("_", " "))
        return Taxonomy({k: tuple(v) for k, v in kinds.items()}, base.diets, base.rules_out)

    def _load(self) -> dict[str, tuple[str, ...]]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(raw, dict) or not all(isinstance(v, list) for v in raw.values()):
                raise ValueError("expected {name: [kind, ...]}")
            return {str(k): tuple(str(x) for x in v) for k, v in raw.items()}
        except (OSError, ValueError) as exc:  # set aside, never lost; start anew
            aside = self.path.with_name(self.path.name + ".corrupt")
            self.path.replace(aside)
            self.problems.append(f"{self.path}: {exc}; set aside as {aside.name}, names are asked again")
            return {}

    def _save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps({k: list(v) for k, v in sorted(self._known.items())}, indent=1).encode("utf-8")
        atomic_write(self.path, data)
