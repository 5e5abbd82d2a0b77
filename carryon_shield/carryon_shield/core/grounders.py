"""Grounding backends by name (the `grounder` parameter of shield_node).

Each entry says how the shield is fed: `uses_masks` (segmentation + label topics; else
color images for a text-prompted segmenter) and `self_filter` (remove points inside the
hand's current geometry: needed when the robot's own mask may be incomplete). Factories
import optional dependencies lazily (text_prompted needs transformers + torch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carryon_common.core.registry import Registry
from carryon_shield.core.grounding import Grounder, GroundingParams, SimMaskGrounder, TextPromptedGrounder

if TYPE_CHECKING:
    from carryon_shield.core.config import ShieldConfig


@dataclass(frozen=True)
class GrounderBackend:
    name: str
    description: str
    make: Callable[[ShieldConfig, GroundingParams], Grounder]
    uses_masks: bool
    self_filter: bool


GROUNDERS: Registry[GrounderBackend] = Registry("grounder")


def _sim_masks(_config: ShieldConfig, params: GroundingParams) -> Grounder:
    return SimMaskGrounder(params)


def _text_prompted(config: ShieldConfig, params: GroundingParams) -> Grounder:
    from carryon_shield.core.text_segmenter import ClipSegSegmenter

    segmenter = ClipSegSegmenter(config.text_model_dir, config.text_mask_threshold)
    return TextPromptedGrounder(params, segmenter, config.robot_prompts)


for _backend in (
    GrounderBackend("sim_masks", "the simulator's instance segmentation and label table", _sim_masks, True, False),
    GrounderBackend(
        "text_prompted", "open-vocabulary segmentation (CLIPSeg) from a local folder", _text_prompted, False, True
    ),
):
    GROUNDERS.register(_backend.name, _backend)
