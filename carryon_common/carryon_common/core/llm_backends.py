"""LLM backends by name, for every package that needs a text LLM (the planner and its
summariser, recovery reflection, the benchmarks, the CLI):

* `openai`: any OpenAI-compatible endpoint (`OpenAiClient`);
* `local`: the offline model behind llm_server_node, llama.cpp's OpenAI-compatible server
  on loopback (`carryon up` starts it with the planner; `OpenAiClient`, decoding
  constrained to the JSON Schema sent with each request);
* `local_inprocess`: the same model in this process with llama.cpp (`LocalLlm`, the model
  assembled by `local_models`), for tools and tests that run without a graph;
* `scripted`: NOT AN LLM, replies from a YAML script for the zero-config demo (`ScriptedLlm`).

The settings are the `llm_*` fields of the planner's config (the one place they are
configured, config/nodes/planner_node.yaml); `make_llm` reads them through the `LlmConfig`
protocol, so a caller passes a PlannerConfig without this module importing the planner.
Each factory imports its backend lazily: the `openai` and `llama_cpp` packages load only
when that backend is chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from carryon_common.core.config import config_path
from carryon_common.core.llm import LlmClient
from carryon_common.core.registry import Registry


class LlmConfig(Protocol):
    """The LLM settings a backend is built from (PlannerConfig has them all; field docs
    there)."""

    @property
    def llm_backend(self) -> str: ...
    @property
    def llm_base_url(self) -> str: ...
    @property
    def llm_model(self) -> str: ...
    @property
    def llm_api_key_env(self) -> str: ...
    @property
    def llm_timeout_s(self) -> float: ...
    @property
    def llm_schema_in_request(self) -> bool: ...
    @property
    def llm_script_file(self) -> str: ...
    @property
    def llm_model_path(self) -> str: ...
    @property
    def llm_local_model(self) -> str: ...
    @property
    def llm_threads(self) -> int: ...
    @property
    def llm_context_tokens(self) -> int: ...
    @property
    def llm_local_url(self) -> str: ...


@dataclass(frozen=True)
class LlmSettings:
    """An `LlmConfig` for callers without a planner config (tools, tests); the defaults
    are PlannerConfig's."""

    llm_backend: str = "local"
    llm_base_url: str = ""
    llm_model: str = ""
    llm_api_key_env: str = "OPENAI_API_KEY"
    llm_timeout_s: float = 120.0
    llm_schema_in_request: bool = False
    llm_script_file: str = ""
    llm_model_path: str = ""
    llm_local_model: str = "1.5b"
    llm_threads: int = 2
    llm_context_tokens: int = 8192
    llm_local_url: str = ""


def script_path(configured: str) -> Path:
    """The scripted backend's YAML: `configured`, else <config dir>/planner/demo_script.yaml."""
    return config_path(configured, "planner", "demo_script.yaml")


def _openai(config: LlmConfig) -> LlmClient:
    from carryon_common.core.openai_client import ResponseFormat, openai_client_from_env

    kind = ResponseFormat.JSON_OBJECT_SCHEMA if config.llm_schema_in_request else ResponseFormat.JSON_OBJECT
    return openai_client_from_env(
        config.llm_base_url, config.llm_model, config.llm_api_key_env, config.llm_timeout_s, response_format=kind
    )


# llm_server_node's default port and address (carryon_planner.core.llm_server).
LOCAL_SERVER_PORT = 8421
LOCAL_SERVER_URL = f"http://127.0.0.1:{LOCAL_SERVER_PORT}/v1"
LOCAL_SERVER_MODEL = "local"  # the server's alias for the model it serves
LOCAL_MAX_TOKENS = 768  # a plan is a few hundred tokens; a small model that loops stops here (as in-process)


def _local(config: LlmConfig) -> LlmClient:
    from carryon_common.core.openai_client import OpenAiClient, ResponseFormat

    url = config.llm_local_url or LOCAL_SERVER_URL
    return OpenAiClient(
        url,
        model=config.llm_model or LOCAL_SERVER_MODEL,
        timeout_s=config.llm_timeout_s,
        attempts=1,  # the server keeps decoding a request whose client gave up: a retry would queue behind it
        max_tokens=LOCAL_MAX_TOKENS,
        response_format=ResponseFormat.JSON_OBJECT_SCHEMA,  # llama.cpp's grammar from the plan's schema
        unreachable_hint="is llm_server_node running and ready? `carryon status`; "
        "`carryon up` starts it when planner_node.llm_backend is local",
    )


def _local_inprocess(config: LlmConfig) -> LlmClient:
    from carryon_common.core.local_llm import LocalLlm
    from carryon_common.core.local_models import LOCAL_MODELS, assemble

    path = Path(config.llm_model_path) if config.llm_model_path else assemble(LOCAL_MODELS[config.llm_local_model])
    return LocalLlm(path, context_tokens=config.llm_context_tokens, threads=config.llm_threads)


def _scripted(config: LlmConfig) -> LlmClient:
    from carryon_common.core.scripted_llm import ScriptedLlm

    return ScriptedLlm(script_path(config.llm_script_file))


LLM_BACKENDS: Registry[Callable[[LlmConfig], LlmClient]] = Registry("LLM backend")
LLM_BACKENDS.register("openai", _openai)
LLM_BACKENDS.register("local", _local)
LLM_BACKENDS.register("local_inprocess", _local_inprocess)
LLM_BACKENDS.register("scripted", _scripted)


def make_llm(config: LlmConfig) -> LlmClient:
    """The backend `config.llm_backend` names. Raises UnknownNameError (with the closest
    name) for an unknown one, ConfigError when it cannot be built (llama-cpp-python or the
    model missing for `local_inprocess`; no key for a remote `openai` endpoint; a bad script)."""
    return LLM_BACKENDS.get(config.llm_backend)(config)
