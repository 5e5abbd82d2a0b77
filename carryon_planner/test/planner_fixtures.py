"""Shared test helpers of the planner tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from carryon_common.core.llm import ChatMessage, LlmError


@dataclass
class ScriptedLlm:
    """An LlmClient answering with `replies` in order ("RAISE" = an unreachable LLM);
    records every conversation it was sent in `seen`."""

    replies: list[str]
    seen: list[list[ChatMessage]] = field(default_factory=list)
    name: str = "scripted"

    def complete(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> str:
        assert schema is not None and schema["title"] == "Plan"
        self.seen.append(list(messages))
        reply = self.replies.pop(0)
        if reply == "RAISE":
            raise LlmError("connection refused")
        return reply
