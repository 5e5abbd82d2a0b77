"""Configuration of shield_node (also read by `carryon bench shield` and the fit command).

Distance thresholds follow the per-part layout of the paper's Table 7: the hand (palm,
flange and wrist), the fingers and a carried object each have their own minimum allowed
predicted distance to any obstacle point; their defaults are the robot model's clearances
(`carryon_robot.core.clearance`), which recovery's grasps keep too.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from carryon_common.core.config import one_of
from carryon_common.core.driver import LIMITS
from carryon_common.core.operator_auth import NodeIdentityConfig, OperatorAuthConfig
from carryon_robot.core.clearance import CARRIED_CLEARANCE_M, FINGER_CLEARANCE_M, HAND_CLEARANCE_M
from carryon_shield.core.grounders import GROUNDERS


class ShieldConfig(OperatorAuthConfig, NodeIdentityConfig):
    enabled: bool = Field(
        True,
        description="Filter chunks. False (ablation): chunks pass through unfiltered, but every ShieldEvent still "
        "reports what the filter would have blocked (emergency stop, invalid and stale chunks are still refused).",
    )
    grounder: Annotated[str, one_of("grounder", GROUNDERS)] = Field(
        "masks",
        description="Obstacle grounding backend by name: 'masks' (perception_node's labelled segmentation, both "
        "profiles), 'text_prompted' (open-vocabulary segmentation model from a local path) or 'sim_truth' "
        "(SIMULATOR ORACLE: the simulator's own masks, an ablation for benchmarks).",
    )
    text_model_dir: str = Field(
        "",
        description="text_prompted: local folder of a transformers CLIPSeg model (nothing is downloaded).",
    )
    text_mask_threshold: float = Field(
        0.5, gt=0.0, lt=1.0, description="text_prompted: per-pixel probability above which a pixel is in a mask."
    )
    robot_prompts: list[str] = Field(
        ["robot arm", "robot gripper"],
        description="text_prompted: prompts whose masks are the robot (removed from the obstacle set).",
    )
    cameras: list[str] = Field(
        ["scene", "wrist"], description="Cameras fused into the obstacle set (topics camera/<name>/...)."
    )
    world_frame: str = Field("world", description="Frame of chunks, poses and obstacle points; others are refused.")
    max_input_publishers: int = Field(
        1,
        ge=1,
        description="Publishers each sensor input (camera depth, pose, masks, labels, ee_pose, gripper width, /clock "
        "under sim time) may have; while one has more, its messages are not used and every chunk fails closed, "
        "naming the topic (a second, unauthenticated publisher would steer the shield; docs/security.md).",
    )
    hand_threshold_m: float = Field(
        HAND_CLEARANCE_M,
        gt=0.0,
        description="Minimum predicted distance between the hand (palm, flange) and obstacles, metres.",
    )
    finger_threshold_m: float = Field(
        FINGER_CLEARANCE_M, gt=0.0, description="Minimum predicted distance between the fingers and obstacles, metres."
    )
    carried_threshold_m: float = Field(
        CARRIED_CLEARANCE_M,
        gt=0.0,
        description="Minimum predicted distance between a carried object and obstacles, metres.",
    )
    whole_arm: bool = Field(
        True,
        description="Check every link of the arm (spheres from robot_file's URDF), the motion between steps and the "
        "IK of every step, from the measured joint_states (none: nothing released). false: the hand, fingers and "
        "carried object only (an ablation).",
    )
    robot_file: str = Field(
        "",
        description="The arm's description, as arm_adapter_node.robot_file ('' = robot/panda.yaml under the config "
        "folder): its URDF's collision geometry, joints, tool centre point and hand links.",
    )
    link_threshold_m: float = Field(
        0.02, gt=0.0, description="Minimum predicted distance between any link of the arm and any point, metres."
    )
    sweep_step_m: float = Field(
        0.01,
        gt=0.0,
        le=0.05,
        description="Between two steps, configurations are checked so that no point of the arm moves more than this "
        "from one to the next (the links' spheres grow by half of it), metres.",
    )
    max_ik_error_m: float = Field(
        LIMITS.max_ik_position_error_m,
        gt=0.0,
        le=LIMITS.max_ik_position_error_m,
        description="A step whose IK misses its target by more is blocked (the drivers refuse it), metres; at most "
        "the drivers' shared limit (MotionLimits).",
    )
    max_ik_rotation_rad: float = Field(
        LIMITS.max_ik_rotation_error_rad,
        gt=0.0,
        le=LIMITS.max_ik_rotation_error_rad,
        description="A step whose IK misses its target's orientation by more is blocked, radians; at most the "
        "drivers' shared limit.",
    )
    max_observation_age_s: float = Field(
        0.5, gt=0.0, description="Chunks computed from older observations are rejected, seconds."
    )
    max_depth_age_s: float = Field(
        0.5, gt=0.0, description="Depth images older than this are not used; none fresh -> nothing released, seconds."
    )
    max_mask_age_s: float = Field(
        0.5, gt=0.0, description="Segmentation masks older than this are not used (fail closed), seconds."
    )
    ground_on_arrival: bool = Field(
        True,
        description="Ground each new camera frame when it arrives, on a worker thread, so a chunk's decision reads "
        "a ready obstacle set (grounded from frames within their age limits); false = each decision grounds the "
        "newest frames itself (slower decisions, never an older frame).",
    )
    max_state_age_s: float = Field(
        0.5, gt=0.0, description="Tool pose / gripper width older than this -> nothing released, seconds."
    )
    retreat_steps: int = Field(3, ge=1, description="Control steps of the retreat sent when the first step is blocked.")
    retreat_distance_m: float = Field(
        0.03, gt=0.0, description="Length of the whole retreat when the first step is blocked, metres."
    )
    retreat_up_weight: float = Field(
        1.0, ge=0.0, description="Weight of the upward component of the retreat direction (away component: 1)."
    )
    voxel_size_m: float = Field(0.01, gt=0.0, description="Voxel size for obstacle point downsampling, metres.")
    pixel_stride: int = Field(2, ge=1, description="Back-project every n-th pixel of each depth image (rows, columns).")
    max_depth_m: float = Field(2.5, gt=0.0, description="Depth returns farther than this are ignored, metres.")
    source_patch_margin_m: float = Field(
        0.08,
        ge=0.0,
        description="Source support exempt beneath the target: support points within this horizontal distance of "
        "the target's points, metres.",
    )
    support_labels: list[str] = Field(
        default_factory=lambda: ["table"],
        description="Segmentation labels of support surfaces: when a task's source is a named location rather "
        "than a segmented object, the exempt patch beneath the target is taken from these.",
    )
    holding_min_width_m: float = Field(
        0.004, ge=0.0, description="Holding latch: closed fingers narrower than this hold nothing, metres."
    )
    holding_max_width_m: float = Field(
        0.075, gt=0.0, description="Holding latch: fingers wider than this hold nothing (open), metres."
    )
    carried_voxel_m: float = Field(
        0.02, gt=0.0, description="Carried-object geometry: its points are summarised by spheres of this cell, metres."
    )
    response_model_file: str = Field(
        "",
        description="YAML of the fitted response model ('' = config/shield/response_model.yaml; missing file -> "
        "the pure lag-free model with a warning).",
    )
    estop_engaged_at_start: bool = Field(
        False,
        description="Start (and restart) with the emergency stop engaged, so a respawned shield never "
        "silently releases an engaged stop; an operator releases it with `carryon estop --release`.",
    )
    estop_engaged_after_restart: bool = Field(
        True,
        description="A shield that finds its own e-stop latch file (it ran before in this run folder or state "
        "path: a restart) comes back engaged whatever the file says; an operator releases it.",
    )
    estop_latch_file: str = Field(
        "",
        description="Where the shield keeps its latched e-stop across restarts ('' = <run folder>/state/"
        "shield_node-estop.json under `carryon up`, else memory only).",
    )
    command_key_file: str = Field(
        "",
        description="File with the key shared with the robot driver: released chunks, e-stop states and heartbeats "
        "are signed with it ('' = none given: `carryon up` and the launch file make a per-run key; else unsigned).",
    )
    heartbeat_period_s: float = Field(
        0.025,
        gt=0.0,
        le=1.0,
        description="Period of the signed heartbeat on shield/heartbeat (wall clock); the driver holds the arm "
        "when it stops (shield_heartbeat_pause_s, then shield_heartbeat_timeout_s), seconds.",
    )
    executor_stall_s: float = Field(
        1.0,
        gt=0.0,
        le=10.0,
        description="Stop the heartbeat when the node's callbacks have not run for this long (a deadlocked or "
        "stalled shield stops the arm), seconds.",
    )
