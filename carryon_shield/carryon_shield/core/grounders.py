"""Grounding backends by name (the `grounder` parameter of shield_node).

Each entry says how the shield is fed: `mask_topics`, where its segmentation + label topics
come from (`camera`: camera/<name>/segmentation + labels, perception_node's; `sim`:
sim/camera/<name>/..., the simulator's own masks, an evaluation ORACLE; '' = none, color
images for a text-prompted segmenter) and `self_filter` (remove points inside the hand's
boxes at the image's instant: needed when the robot's own mask may be incomplete). Factories import
optional dependencies lazily (text_prompted needs transformers + torch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carryon_common.core.names import ORACLE_LABEL, camera_topic, sim_truth_camera_topic
from carryon_common.core.registry import Registry
from carryon_shield.core.grounding import Grounder, GroundingParams, MaskGrounder, TextPromptedGrounder

if TYPE_CHECKING:
    from carryon_shield.core.config import ShieldConfig


@dataclass(frozen=True)
class GrounderBackend:
    name: str
    description: str
    make: Callable[[ShieldConfig, GroundingParams], Grounder]
    mask_topics: str
    self_filter: bool
    self_filter_margin_m: float = 0.01  # points inside the hand's boxes grown by this much are removed

    @property
    def uses_masks(self) -> bool:
        return bool(self.mask_topics)

    def mask_topic(self, camera: str, stream: str) -> str:
        """Where this grounder's `segmentation` / `labels` of `camera` are published."""
        return sim_truth_camera_topic(camera, stream) if self.mask_topics == "sim" else camera_topic(camera, stream)


GROUNDERS: Registry[GrounderBackend] = Registry("grounder")


def _masks(_config: ShieldConfig, params: GroundingParams) -> Grounder:
    return MaskGrounder(params, "masks")


def _sim_truth(_config: ShieldConfig, params: GroundingParams) -> Grounder:
    return MaskGrounder(params, "sim_truth")


def _text_prompted(config: ShieldConfig, params: GroundingParams) -> Grounder:
    from carryon_shield.core.text_segmenter import ClipSegSegmenter

    segmenter = ClipSegSegmenter(config.text_model_dir, config.text_mask_threshold)
    return TextPromptedGrounder(params, segmenter, config.robot_prompts)


for _backend in (
    # perception's robot mask may miss a few of the robot's own pixels (a model a little off the
    # real arm): what lies inside the hand's exact boxes, posed at the image's instant, is removed
    # as well, not grown by a margin (a margin, or the boxes' covering spheres, or the pose of
    # another instant hid the bottle's nearest points from the hand in the demo)
    GrounderBackend(
        "masks",
        "perception_node's labelled instance segmentation (camera/<name>/segmentation)",
        _masks,
        "camera",
        True,
        0.0,
    ),
    GrounderBackend(
        "sim_truth",
        f"{ORACLE_LABEL}: the simulator's own instance segmentation (sim/camera/<name>/...), an ablation",
        _sim_truth,
        "sim",
        False,
    ),
    GrounderBackend(
        "text_prompted", "open-vocabulary segmentation (CLIPSeg) from a local folder", _text_prompted, "", True
    ),
):
    GROUNDERS.register(_backend.name, _backend)
