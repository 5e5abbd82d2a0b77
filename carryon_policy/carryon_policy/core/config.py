"""Configuration of policy_node."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from carryon_common.core.config import NodeConfig, one_of

POLICY_BACKENDS = ("sim_scripted", "sim_scripted_safe", "openpi_remote", "lerobot_local")


class PolicyConfig(NodeConfig):
    backend: Annotated[str, one_of("policy backend", POLICY_BACKENDS)] = Field(
        "sim_scripted",
        description="Policy backend by name: 'sim_scripted' (scripted stand-in for a frozen VLA), "
        "'sim_scripted_safe' (stand-in for a safety-finetuned VLA), 'openpi_remote', 'lerobot_local'.",
    )
    control_rate_hz: float = Field(20.0, gt=0.0, le=1000.0, description="Rate at which chunk steps execute, Hz.")
    chunk_horizon: int = Field(16, ge=1, description="Steps per inferred chunk.")
    steps_per_inference: int = Field(
        8, ge=1, description="Steps executed before the next inference (<= chunk_horizon)."
    )
    default_step_budget: int = Field(400, ge=1, description="Step budget when a RunPolicy goal gives 0.")
    remote_uri: str = Field("", description="URI of a remote policy server, e.g. ws://gpu-box:8000 ('' = unused).")

    @model_validator(mode="after")
    def _steps_within_horizon(self) -> PolicyConfig:
        if self.steps_per_inference > self.chunk_horizon:
            raise ValueError(
                f"steps_per_inference ({self.steps_per_inference}) must not exceed chunk_horizon ({self.chunk_horizon})"
            )
        return self
