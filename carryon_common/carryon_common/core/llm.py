"""The one LLM contract: chat messages (text and image parts), the client protocol, its error.

The planner, the summariser, recovery reflection and the VLM judge all talk to an
`LlmClient`; the backends (an OpenAI-compatible endpoint, llama.cpp in-process, scripted
replies) are chosen by name in `carryon_common.core.llm_backends`.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from carryon_common.core.errors import CarryOnError

Role = Literal["system", "user", "assistant"]
IMAGE_MIMES = ("image/png", "image/jpeg")


class LlmError(CarryOnError):
    """The LLM could not be reached, did not answer in time or answered an error (the
    reason says which)."""


@dataclass(frozen=True)
class ImagePart:
    """One image attached to a message, as a data URL (`data:image/png;base64,...`) or an
    http(s) URL the server fetches itself."""

    url: str

    @classmethod
    def from_bytes(cls, data: bytes, mime: str) -> ImagePart:
        """An encoded image (PNG or JPEG file bytes) as a base64 data URL."""
        if mime not in IMAGE_MIMES:
            raise ValueError(f"image mime {mime!r}: one of {', '.join(IMAGE_MIMES)}")
        return cls(f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}")


Part = str | ImagePart  # a str is a text part


@dataclass(frozen=True)
class ChatMessage:
    """`content`: plain text, or text and image parts in the order the model reads them."""

    role: Role
    content: str | tuple[Part, ...]

    @property
    def text(self) -> str:
        """The text parts, joined by newlines (images left out)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p for p in self.content if isinstance(p, str))

    @property
    def images(self) -> tuple[ImagePart, ...]:
        if isinstance(self.content, str):
            return ()
        return tuple(p for p in self.content if isinstance(p, ImagePart))


class LlmClient(Protocol):
    """Answers a chat with one JSON text. `schema` (JSON Schema) is what the reply should
    follow: backends that can constrain decoding to it do, the others ask for plain JSON
    (callers state the schema in the prompt too); None = any JSON object."""

    @property
    def name(self) -> str: ...

    def complete(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> str:
        """The reply text. `timeout_s`: bound on this call, seconds (None = the backend's
        configured timeout). Raises LlmError (timeout, connection, HTTP error, no text)."""
        ...
