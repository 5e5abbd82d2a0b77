"""The LLM behind the planner: a small client interface and the messages it exchanges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from carryon_common.core.errors import CarryOnError


class LlmError(CarryOnError):
    """The LLM could not be reached or did not answer in time (the reason says which)."""


@dataclass(frozen=True)
class ChatMessage:
    role: Literal["system", "user", "assistant"]
    content: str


class LlmClient(Protocol):
    """Answers a chat with one JSON text that should follow `schema` (JSON Schema)."""

    @property
    def name(self) -> str: ...

    def complete(self, messages: Sequence[ChatMessage], schema: dict[str, Any]) -> str:
        """The reply text. Raises LlmError (timeout, connection, HTTP error)."""
