"""`openai` LLM backend: any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama,
llama.cpp's server) through the official `openai` client.

JSON mode: `response_format={"type": "json_object"}` plus the schema in the system
prompt works on every server tried (llama.cpp's server also accepts the schema inside
json_object; OpenAI's `json_schema` type is refused by some servers). The key is read
from the environment variable named in the config, never from a file.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import openai

from carryon_common.core.errors import ConfigError
from carryon_planner.core.llm import ChatMessage, LlmError

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"


class OpenAiLlm:
    """Chat completions with a per-request timeout; `attempts` tries on connection errors,
    timeouts and 5xx (never on 4xx: a bad request stays bad)."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str,
        timeout_s: float,
        attempts: int = 2,
        schema_in_request: bool = False,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.attempts = max(1, attempts)
        self.schema_in_request = schema_in_request
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout_s, max_retries=0)

    @property
    def name(self) -> str:
        return f"openai:{self.model}@{self.base_url}"

    def complete(self, messages: Sequence[ChatMessage], schema: dict[str, Any]) -> str:
        response_format: dict[str, Any] = {"type": "json_object"}
        if self.schema_in_request:
            response_format["schema"] = schema  # llama.cpp's server: grammar-constrained decoding
        last: Exception | None = None
        for _ in range(self.attempts):
            try:
                completion = self._client.chat.completions.create(
                    model=self.model,
                    messages=[{"role": m.role, "content": m.content} for m in messages],  # type: ignore[call-overload]
                    response_format=response_format,
                    temperature=0.0,
                )
            except (openai.APIConnectionError, openai.APITimeoutError, openai.InternalServerError) as exc:
                last = exc
                continue
            except openai.APIStatusError as exc:
                raise LlmError(f"{self.base_url} answered HTTP {exc.status_code}: {exc.message}") from None
            if not completion.choices or completion.choices[0].message.content is None:
                raise LlmError(f"{self.base_url} returned no message content")
            content: str = completion.choices[0].message.content
            return content
        raise LlmError(f"{self.base_url} failed {self.attempts} time(s): {type(last).__name__}: {last}")


def make_openai_llm(
    base_url: str, model: str, api_key_env: str, timeout_s: float, *, schema_in_request: bool = False
) -> OpenAiLlm:
    """The backend from planner config values ('' = defaults); a named but unset key
    variable is a ConfigError unless the endpoint is local (loopback servers need none)."""
    url = base_url or DEFAULT_BASE_URL
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    local = any(host in url for host in ("://127.", "://localhost", "://[::1]"))
    if not key and not local:
        raise ConfigError(f"llm_backend openai at {url} needs an API key in ${api_key_env or '(unset name)'}")
    return OpenAiLlm(
        base_url=url, model=model or DEFAULT_MODEL, api_key=key, timeout_s=timeout_s,
        schema_in_request=schema_in_request,
    )  # fmt: skip
