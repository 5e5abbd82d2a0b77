"""Configuration of shield_node."""

from __future__ import annotations

from pydantic import Field, field_validator

from carryon_common.core.config import NodeConfig, check_name

GROUNDERS = ("sim_masks", "text_prompted")


class ShieldConfig(NodeConfig):
    grounder: str = Field(
        "sim_masks",
        description="Obstacle grounding backend by name: 'sim_masks' (simulator segmentation labels) or "
        "'text_prompted' (open-vocabulary segmentation model from a local path).",
    )
    distance_threshold_m: float = Field(
        0.03,
        gt=0.0,
        description="Minimum allowed predicted distance between gripper/carried object and obstacles, metres.",
    )
    max_observation_age_s: float = Field(
        0.5, gt=0.0, description="Chunks computed from older observations are rejected, seconds."
    )
    retreat_distance_m: float = Field(
        0.03, gt=0.0, description="Length of the retreat when the first step is blocked, metres."
    )
    voxel_size_m: float = Field(0.01, gt=0.0, description="Voxel size for obstacle point downsampling, metres.")

    @field_validator("grounder")
    @classmethod
    def _known_grounder(cls, value: str) -> str:
        return check_name("grounder", value, GROUNDERS)
