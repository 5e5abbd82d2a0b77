"""Configuration of shield_node."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from carryon_common.core.config import NodeConfig, one_of

GROUNDERS = ("sim_masks", "text_prompted")


class ShieldConfig(NodeConfig):
    grounder: Annotated[str, one_of("grounder", GROUNDERS)] = Field(
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
    estop_engaged_at_start: bool = Field(
        False,
        description="Start (and restart) with the emergency stop engaged, so a respawned shield never "
        "silently releases an engaged stop; an operator releases it with `carryon estop --release`.",
    )
