"""The one shield builder (node, harness gate and benchmark all use it) and the grounder
registry."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from carryon_common.core.errors import UnknownNameError
from carryon_shield.core.build import build_shield, grounding_params
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.grounders import GROUNDERS
from carryon_shield.core.grounding import MaskGrounder
from carryon_shield.core.response import ResponseModel


def test_the_config_reaches_every_part() -> None:
    config = ShieldConfig(
        hand_threshold_m=0.03,
        finger_threshold_m=0.01,
        carried_threshold_m=0.02,
        retreat_steps=5,
        retreat_distance_m=0.05,
        max_observation_age_s=0.3,
        pixel_stride=3,
        cameras=["scene"],
        estop_engaged_at_start=True,
        enabled=False,
    )
    pipeline = build_shield(config, ResponseModel.identity(0.05))
    shield, gate, perception = pipeline.shield, pipeline.gate, pipeline.perception
    assert (shield.thresholds.hand_m, shield.thresholds.fingers_m, shield.thresholds.carried_m) == (0.03, 0.01, 0.02)
    assert (shield.retreat.steps, shield.retreat.distance_m) == (5, 0.05)
    assert gate.chunk_filter is shield and gate.threshold_m == 0.03 and gate.max_observation_age_s == 0.3
    assert gate.estop_active and not shield.enabled
    assert perception.cameras == ("scene",) and isinstance(perception.grounder, MaskGrounder)
    assert perception.grounder.params == grounding_params(config) and perception.grounder.params.stride == 3
    assert shield.perceive == perception.snapshot


def test_each_grounder_says_what_it_needs() -> None:
    assert GROUNDERS.names() == ["masks", "sim_truth", "text_prompted"]
    masks, oracle, text = GROUNDERS.get("masks"), GROUNDERS.get("sim_truth"), GROUNDERS.get("text_prompted")
    assert (masks.uses_masks, masks.self_filter) == (True, True)  # perception's robot mask may be incomplete
    assert (oracle.uses_masks, oracle.self_filter) == (True, False)
    assert masks.self_filter_margin_m == 0.0  # only what is inside the hand: never an obstacle's near side
    assert (text.uses_masks, text.self_filter) == (False, True)
    # perception_node's masks on camera/<name>/...; the simulator's own only under sim/, labelled ORACLE
    assert masks.mask_topic("scene", "segmentation") == "camera/scene/segmentation"
    assert oracle.mask_topic("wrist", "labels") == "sim/camera/wrist/labels"
    assert "ORACLE" in oracle.description and "ORACLE" not in masks.description
    perception = build_shield(ShieldConfig(), ResponseModel.identity(0.05)).perception
    assert perception.uses_masks and perception.self_filter


def test_an_unknown_grounder_is_refused_with_the_closest_name() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'masks'"):
        GROUNDERS.get("mask")
    with pytest.raises(ValidationError, match="did you mean 'text_prompted'"):
        ShieldConfig(grounder="text_promted")
