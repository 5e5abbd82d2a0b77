"""The one OpenAI-compatible chat client (OpenAI, vLLM, Ollama, llama.cpp's server), shared
by the planner, the summariser, recovery reflection and the VLM judge.

It speaks through the official `openai` package (already a runtime dependency; its HTTP
connection is kept alive between requests) with the package's own retries off: this
client retries transient failures (no connection, timeout, HTTP 429 and 5xx) with
exponential backoff and never a 4xx (a bad request stays bad). Every failure is an
`LlmError` naming the endpoint and what went wrong.

JSON: `ResponseFormat.JSON_OBJECT` (JSON mode, the schema in the prompt only) works on
every server tried; `JSON_OBJECT_SCHEMA` puts the schema inside json_object (llama.cpp's
server then constrains decoding to it); `JSON_SCHEMA` is OpenAI's structured-output
`json_schema` type (OpenAI, vLLM; refused by some servers); `NONE` sends no
response_format. The key is read from the environment variable named in the config,
never from a file.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import openai

from carryon_common.core.errors import ConfigError
from carryon_common.core.llm import ChatMessage, LlmError

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
LOOPBACK_HOSTS = ("://127.", "://localhost", "://[::1]")


class ResponseFormat(enum.StrEnum):
    NONE = "none"
    JSON_OBJECT = "json_object"
    JSON_OBJECT_SCHEMA = "json_object_schema"
    JSON_SCHEMA = "json_schema"


def wire_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The messages in the OpenAI chat format: plain text stays a string; text and image
    parts become a content list (`text` and `image_url` parts, in order)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message.content, str):
            out.append({"role": message.role, "content": message.content})
            continue
        parts = [
            {"type": "text", "text": p} if isinstance(p, str) else {"type": "image_url", "image_url": {"url": p.url}}
            for p in message.content
        ]
        out.append({"role": message.role, "content": parts})
    return out


def response_format(kind: ResponseFormat, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The request's `response_format` (None = leave it out); without a schema, the
    schema kinds fall back to plain JSON mode."""
    if kind == ResponseFormat.NONE:
        return None
    if schema is None or kind == ResponseFormat.JSON_OBJECT:
        return {"type": "json_object"}
    if kind == ResponseFormat.JSON_OBJECT_SCHEMA:
        return {"type": "json_object", "schema": schema}
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in str(schema.get("title", "reply")))[:64]
    return {"type": "json_schema", "json_schema": {"name": name or "reply", "schema": schema, "strict": False}}


class OpenAiClient:
    """An `LlmClient` for one model at one endpoint.

    `timeout_s`: bound on one request, seconds; `attempts`: tries per call on transient
    failures; `backoff_s`: wait before the second try, doubled before each further one,
    seconds; `temperature`: sampling temperature (0 = greedy, reproducible plans)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str = "",
        timeout_s: float = 60.0,
        attempts: int = 2,
        backoff_s: float = 0.5,
        response_format: ResponseFormat = ResponseFormat.JSON_OBJECT,
        temperature: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
        unreachable_hint: str = "",
        max_tokens: int | None = None,
    ) -> None:
        self.base_url = base_url
        self.unreachable_hint = unreachable_hint  # said when nothing answers at base_url
        self.max_tokens = max_tokens  # reply length cap sent with each request (None: the server's)
        self.model = model
        self.timeout_s = timeout_s
        self.attempts = max(1, attempts)
        self.backoff_s = backoff_s
        self.response_format = ResponseFormat(response_format)
        self.temperature = temperature
        self._sleep = sleep
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout_s, max_retries=0)

    @property
    def name(self) -> str:
        return f"openai:{self.model}@{self.base_url}"

    def complete(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> str:
        """The reply text; `timeout_s` bounds each try (None = the configured timeout)."""
        timeout = self.timeout_s if timeout_s is None else timeout_s
        extra: dict[str, Any] = {}
        fmt = response_format(self.response_format, schema)
        if fmt is not None:
            extra["response_format"] = fmt
        if self.max_tokens is not None:
            extra["max_tokens"] = self.max_tokens
        problems: list[str] = []
        for attempt in range(self.attempts):
            if attempt:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                completion = self._client.chat.completions.create(
                    model=self.model,
                    messages=wire_messages(messages),  # type: ignore[arg-type]  # OpenAI-format dicts
                    temperature=self.temperature,
                    timeout=timeout,
                    **extra,
                )
            except openai.APITimeoutError:
                problems.append(f"no reply within {timeout:.1f} s")
                continue
            except openai.APIConnectionError as exc:
                hint = f" ({self.unreachable_hint})" if self.unreachable_hint else ""
                problems.append(f"cannot connect: {exc.__cause__ or exc}{hint}")
                continue
            except openai.APIStatusError as exc:
                problem = f"HTTP {exc.status_code}: {str(exc.message)[:200]}"
                if exc.status_code == 429 or exc.status_code >= 500:
                    problems.append(problem)
                    continue
                raise LlmError(f"{self.base_url} answered {problem}") from None
            except openai.APIError as exc:
                raise LlmError(f"{self.base_url}: {type(exc).__name__}: {exc}") from None
            if not completion.choices or completion.choices[0].message.content is None:
                raise LlmError(f"{self.base_url} returned no message content")
            content: str = completion.choices[0].message.content
            return content
        if len(problems) == 1:
            raise LlmError(f"{self.base_url}: {problems[0]}")
        raise LlmError(f"{self.base_url}: failed {len(problems)} attempts; last: {problems[-1]}")

    def warm_up(self, messages: Sequence[ChatMessage], timeout_s: float) -> None:
        """Have the server read `messages` once (one token answered, nothing kept): a server
        that keeps the last prompt's state (llama.cpp) then re-uses its shared prefix, such as
        the planner's rules and schema, instead of reading it again in the first request.
        Raises LlmError when the server does not answer."""
        try:
            self._client.chat.completions.create(
                model=self.model,
                messages=wire_messages(messages),  # type: ignore[arg-type]  # OpenAI-format dicts
                max_tokens=1,
                temperature=0.0,
                timeout=timeout_s,
            )
        except openai.APIError as exc:
            raise LlmError(f"{self.base_url}: warm-up: {type(exc).__name__}: {exc}") from None


def openai_client_from_env(
    base_url: str,
    model: str,
    api_key_env: str,
    timeout_s: float,
    *,
    response_format: ResponseFormat = ResponseFormat.JSON_OBJECT,
    attempts: int = 2,
) -> OpenAiClient:
    """The client from config values ('' = defaults), its key read from `$api_key_env`; a
    named but unset key variable is a ConfigError unless the endpoint is on loopback (local
    servers need none)."""
    url = base_url or DEFAULT_BASE_URL
    key = os.environ.get(api_key_env, "") if api_key_env else ""
    if not key and not any(host in url for host in LOOPBACK_HOSTS):
        raise ConfigError(f"llm_backend openai at {url} needs an API key in ${api_key_env or '(unset name)'}")
    return OpenAiClient(
        url,
        model=model or DEFAULT_MODEL,
        api_key=key,
        timeout_s=timeout_s,
        attempts=attempts,
        response_format=response_format,
    )
