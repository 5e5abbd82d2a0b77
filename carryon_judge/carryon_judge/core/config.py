"""Configuration of judge_node."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from carryon_common.core.config import NodeConfig, one_of

JUDGE_BACKENDS = ("vlm", "geometric", "sim_state")


class JudgeConfig(NodeConfig):
    backend: Annotated[str, one_of("judge backend", JUDGE_BACKENDS)] = Field(
        "geometric",
        description="Judge backend by name: 'vlm' (OpenAI-compatible vision-language model), 'geometric' "
        "(masks + depth), 'sim_state' (simulator ground truth, benchmarks only).",
    )
    stuck_timeout_s: float = Field(
        20.0, gt=0.0, description="No task-relevant progress for this long -> failed, seconds."
    )
    period_s: float = Field(1.0, gt=0.0, description="Interval between verdicts on the active subtask, seconds.")
    vlm_base_url: str = Field("", description="Base URL of the VLM endpoint ('' = unused).")
    vlm_model: str = Field("", description="VLM model name ('' = backend default).")
