"""The planner's LLM by configured name: `local` (offline, in-process), `openai`, or
`scripted` (NOT AN LLM: scripted replies for the demo)."""

from __future__ import annotations

from pathlib import Path

from carryon_common.core.config import config_path
from carryon_planner.core.config import PlannerConfig
from carryon_planner.core.llm import LlmClient


def make_llm(config: PlannerConfig) -> LlmClient:
    """The configured backend. Raises ConfigError when it cannot be built (llama-cpp-python
    or the model missing for `local`; no key for `openai`)."""
    if config.llm_backend == "scripted":
        from carryon_planner.core.scripted_llm import ScriptedLlm

        return ScriptedLlm(script_path(config.llm_script_file))
    if config.llm_backend == "openai":
        from carryon_planner.core.openai_llm import make_openai_llm

        return make_openai_llm(
            config.llm_base_url, config.llm_model, config.llm_api_key_env, config.llm_timeout_s,
            schema_in_request=config.llm_schema_in_request,
        )  # fmt: skip
    from carryon_planner.core.local_llm import LocalLlm
    from carryon_planner.models import LOCAL_MODELS, assemble

    path = Path(config.llm_model_path) if config.llm_model_path else assemble(LOCAL_MODELS[config.llm_local_model])
    return LocalLlm(path, context_tokens=config.llm_context_tokens, threads=config.llm_threads)


def script_path(configured: str) -> Path:
    """The scripted backend's YAML: `configured`, else <config dir>/planner/demo_script.yaml."""
    return config_path(configured, "planner", "demo_script.yaml")
