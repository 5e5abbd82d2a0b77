"""The one shield builder: ShieldConfig -> grounder, perception, filter and gate.

shield_node, the simulation harness's gate (carryon_sim.harness.shield_gate) and
`carryon bench shield` all call `build_shield`, so the thresholds, retreat, grounding and
gate they decide with cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from carryon_robot.core.kinematics import load_robot
from carryon_shield.core.arm import ArmCheck, ArmThresholds
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.filter import GeometricShield, RetreatParams, Snapshot, Thresholds
from carryon_shield.core.gate import ShieldGate
from carryon_shield.core.geometry import HoldingLatch
from carryon_shield.core.grounders import GROUNDERS
from carryon_shield.core.grounding import Grounder, GroundingParams
from carryon_shield.core.perception import ShieldPerception
from carryon_shield.core.response import ResponseModel


def thresholds(config: ShieldConfig) -> Thresholds:
    """Per-part minimum predicted distances, metres."""
    return Thresholds(config.hand_threshold_m, config.finger_threshold_m, config.carried_threshold_m)


def retreat_params(config: ShieldConfig) -> RetreatParams:
    return RetreatParams(config.retreat_steps, config.retreat_distance_m, config.retreat_up_weight)


def arm_check(config: ShieldConfig) -> ArmCheck | None:
    """The whole-arm check (None with `whole_arm: false`): the robot file's collision model
    and kinematics, built once per process."""
    if not config.whole_arm:
        return None
    robot = load_robot(config.robot_file)
    limits = ArmThresholds(config.link_threshold_m, config.max_ik_error_m, config.max_ik_rotation_rad)
    return ArmCheck(robot.arm_model(), robot.kinematics(), limits, sweep_m=config.sweep_step_m)


def grounding_params(config: ShieldConfig) -> GroundingParams:
    return GroundingParams(
        config.voxel_size_m,
        config.pixel_stride,
        config.max_depth_m,
        config.source_patch_margin_m,
        config.world_frame,
        tuple(config.support_labels),
    )


@dataclass
class ShieldPipeline:
    """perception: sensor cache + grounding + holding latch; shield: the collision filter;
    gate: the pre-checks (e-stop, validity, staleness) in front of the filter."""

    perception: ShieldPerception
    shield: GeometricShield
    gate: ShieldGate


def build_shield(
    config: ShieldConfig,
    response: ResponseModel,
    *,
    perceive: Callable[[float], Snapshot] | None = None,
    grounder: Grounder | None = None,
) -> ShieldPipeline:
    """The shield `config` describes. `perceive(now_s)` gives the filter its snapshot
    (default: the perception's own; a node may wrap it to add its frame errors);
    `grounder` replaces the configured one (tests)."""
    backend = GROUNDERS.get(config.grounder)
    perception = ShieldPerception(
        grounder if grounder is not None else backend.make(config, grounding_params(config)),
        HoldingLatch(config.holding_min_width_m, config.holding_max_width_m),
        cameras=config.cameras,
        max_depth_age_s=config.max_depth_age_s,
        max_mask_age_s=config.max_mask_age_s,
        max_state_age_s=config.max_state_age_s,
        carried_voxel_m=config.carried_voxel_m,
        uses_masks=backend.uses_masks,
        self_filter=backend.self_filter,
        self_filter_margin_m=backend.self_filter_margin_m,
        index_arm=config.whole_arm,
    )
    shield = GeometricShield(
        perceive if perceive is not None else perception.snapshot,
        response,
        thresholds(config),
        retreat_params(config),
        world_frame=config.world_frame,
        enabled=config.enabled,
        arm=arm_check(config),
    )
    gate = ShieldGate(
        max_observation_age_s=config.max_observation_age_s,
        threshold_m=config.hand_threshold_m,
        chunk_filter=shield,
        estop_active=config.estop_engaged_at_start,
    )
    return ShieldPipeline(perception, shield, gate)
