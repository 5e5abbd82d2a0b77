"""`llm_backend: scripted` — SCRIPTED replies instead of an LLM, for the zero-config demo.

NOT AN LLM: each request is answered with the first entry of a YAML script whose `when`
matches it (the schema asked for, text the conversation contains). Everything after the
reply is real: parsing, the validator, the repair loop, the executive. The node says so
at start and in its status (backend "scripted (NOT AN LLM)").

    replies:
      - when: {schema: Plan, contains: "Observed since the last plan"}
        reply: {reply: "...", subtasks: [...]}
      - when: {schema: Summary}
        reply: {remember: []}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from carryon_common.core.config import format_validation_error, read_yaml
from carryon_common.core.errors import ConfigError
from carryon_common.core.llm import ChatMessage, LlmError


class When(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_title: str = Field("", alias="schema", description="Title of the JSON Schema asked for ('' = any).")
    contains: str = Field("", description="Text the conversation must contain ('' = any).")
    lacks: str = Field("", description="Text the conversation must not contain ('' = no condition).")


class Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = ""
    when: When = Field(default_factory=When)
    reply: dict[str, Any] | str


class Script(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    replies: list[Entry] = Field(min_length=1)


class ScriptedLlm:
    """Answers from a script (see the module docstring); `answered` counts replies given."""

    name = "scripted (NOT AN LLM)"

    def __init__(self, path: Path) -> None:
        try:
            self.script = Script.model_validate(read_yaml(path))
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, {}, str(path))) from None
        self.path = path
        self.answered = 0

    def complete(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> str:
        """The first matching entry's reply (`timeout_s` unused: the answer is immediate)."""
        del timeout_s
        text = "\n".join(m.text for m in messages)
        title = str((schema or {}).get("title", ""))
        for entry in self.script.replies:
            w = entry.when
            if w.schema_title and w.schema_title != title:
                continue
            if (w.contains and w.contains not in text) or (w.lacks and w.lacks in text):
                continue
            self.answered += 1
            return entry.reply if isinstance(entry.reply, str) else json.dumps(entry.reply)
        raise LlmError(f"no scripted reply in {self.path} matches this {title or 'request'}")
