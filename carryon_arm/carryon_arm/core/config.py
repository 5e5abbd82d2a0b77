"""Configuration of arm_adapter_node (defaults: the simulator's Franka Panda behind ros2_control)."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator, model_validator

from carryon_common.core.config import NodeConfig, one_of
from carryon_common.core.driver import LIMITS, WORKSPACE_MAX, WORKSPACE_MIN, DriverCommandConfig, MotionLimits

INTERFACES = ("joint_trajectory", "pose_target")


class ArmAdapterConfig(DriverCommandConfig):
    interface: Annotated[str, one_of("arm interface", INTERFACES)] = Field(
        "joint_trajectory",
        description="How released steps reach your controller: 'joint_trajectory' (IK here, one "
        "trajectory_msgs/JointTrajectory point per step, e.g. ros2_control's joint_trajectory_controller) or "
        "'pose_target' (geometry_msgs/PoseStamped tool targets in command_frame_id, e.g. a Cartesian "
        "impedance / motion controller).",
    )
    command_topic: str = Field(
        "/joint_trajectory_controller/joint_trajectory",
        description="Topic of your controller that receives the commands (absolute name).",
    )
    command_frame_id: str = Field(
        "panda_link0", description="Frame of pose targets (the URDF's base link); pose_target only."
    )
    joint_states_topic: str = Field(
        "/joint_states", description="Your driver's sensor_msgs/JointState topic (absolute name)."
    )
    gripper_command_topic: str = Field(
        "", description="std_msgs/Float64 target finger width topic, metres ('' = the gripper is not commanded)."
    )
    robot_file: str = Field(
        "",
        description="The arm's kinematic description (URDF, joints, tool centre point, base pose), absolute or "
        "relative to the config folder ('' = robot/panda.yaml).",
    )
    control_rate_hz: float = Field(20.0, gt=0.0, le=1000.0, description="Rate at which chunk steps are sent, Hz.")
    watchdog_s: float = Field(
        0.25, gt=0.0, description="Hold the arm when no released command arrived for this long, seconds."
    )
    state_timeout_s: float = Field(
        0.5, gt=0.0, description="Joint states older than this are stale: the arm holds and chunks are refused, s."
    )
    max_ik_error_m: float = Field(
        LIMITS.max_ik_position_error_m,
        gt=0.0,
        description="A step whose IK misses its position by more is refused; at most the shared "
        "MotionLimits.max_ik_position_error_m (carryon_common.core.driver), which it may only tighten, metres.",
    )
    max_joint_step_rad: float = Field(
        LIMITS.max_joint_step_rad,
        gt=0.0,
        description="A step that moves any joint target further from the last commanded joints (the measured ones "
        "before the first command of a chunk) is refused; at most the shared MotionLimits.max_joint_step_rad, "
        "which it may only tighten (the shared joint speed limit applies too: MotionLimits.max_joint_speed_rad_s "
        "times the chunk's dt), rad.",
    )
    max_joint_speed_rad_s: float = Field(
        2.6,
        gt=0.0,
        description="The fastest any joint of the arm can move (the Panda's: 2.175-2.61): a joint state in which a "
        "joint moved further since the last accepted one than this speed allows (plus joint_state_tolerance_rad) "
        "is refused and never used, rad/s.",
    )
    joint_state_tolerance_rad: float = Field(
        0.03,
        ge=0.0,
        description="Measurement noise and stamp jitter allowed on top of max_joint_speed_rad_s times the time "
        "between two joint states, and beyond the URDF's joint limits, rad.",
    )
    joint_state_anchor_count: int = Field(
        5,
        ge=1,
        description="Consecutive joint states that agree with each other needed before the first position is taken "
        "after start (a single stray message is no position), count.",
    )
    joint_state_reanchor_count: int = Field(
        0,
        ge=0,
        description="After the joint states jumped (refused), take the new position once this many consecutive "
        "ones agree with each other, while no chunk executes and no extra publisher is on joint_states_topic "
        "(0 = never: a jump may be a second source, not the arm; restart arm_adapter_node after moving the arm by "
        "hand), count.",
    )
    max_joint_state_publishers: int = Field(
        1,
        ge=1,
        description="Publishers allowed on joint_states_topic: with more (a second joint_state_publisher, a GUI "
        "slider, another robot's driver) chunks are refused and the arm holds. Set 2 when your arm and gripper "
        "drivers both publish on this topic, count.",
    )
    workspace_min: list[float] = Field(
        default_factory=lambda: list(WORKSPACE_MIN), description="Lower corner of the allowed TCP box in 'world', m."
    )
    workspace_max: list[float] = Field(
        default_factory=lambda: list(WORKSPACE_MAX), description="Upper corner of the allowed TCP box in 'world', m."
    )
    cameras_file: str = Field(
        "",
        description="YAML mapping your camera drivers' topics and frames to CarryOn's camera/<name>/... topics, "
        "absolute or relative to the config folder ('' = your drivers publish those topics themselves; "
        "example: arm/cameras.yaml).",
    )

    @field_validator("max_ik_error_m", "max_joint_step_rad")
    @classmethod
    def _only_tightens(cls, value: float, info: ValidationInfo) -> float:
        shared = {"max_ik_error_m": "max_ik_position_error_m", "max_joint_step_rad": "max_joint_step_rad"}
        name = shared[str(info.field_name)]
        limit = getattr(LIMITS, name)
        if value > limit:
            raise ValueError(
                f"{info.field_name} {value:g} is above the shared limit MotionLimits.{name} {limit:g} "
                "(carryon_common.core.driver): a driver's config may only tighten it"
            )
        return value

    @property
    def limits(self) -> MotionLimits:
        """The shared MotionLimits with this config's tighter joint step and IK error."""
        return replace(LIMITS, max_joint_step_rad=self.max_joint_step_rad, max_ik_position_error_m=self.max_ik_error_m)

    @model_validator(mode="after")
    def _check_vectors(self) -> ArmAdapterConfig:
        for name in ("workspace_min", "workspace_max"):
            if len(getattr(self, name)) != 3:
                raise ValueError(f"{name} needs 3 numbers, got {getattr(self, name)}")
        if any(lo >= hi for lo, hi in zip(self.workspace_min, self.workspace_max, strict=True)):
            raise ValueError(f"workspace_min {self.workspace_min} must lie below workspace_max {self.workspace_max}")
        return self


class FakeControllerConfig(NodeConfig):
    """A stand-in for your arm's controllers (tests and dry runs without a robot): it follows
    the commands arm_adapter_node sends and publishes joint states like ros2_control's
    joint_state_broadcaster. Not a physics simulation: joints move at a capped speed."""

    interface: Annotated[str, one_of("arm interface", INTERFACES)] = Field(
        "joint_trajectory", description="Which command the controller accepts (as arm_adapter_node.interface)."
    )
    command_topic: str = Field(
        "/joint_trajectory_controller/joint_trajectory", description="Topic the commands arrive on."
    )
    joint_states_topic: str = Field("/joint_states", description="Where joint states are published.")
    gripper_command_topic: str = Field("", description="std_msgs/Float64 finger width topic ('' = fingers fixed).")
    rate_hz: float = Field(100.0, gt=0.0, le=1000.0, description="Joint state rate, Hz.")
    max_velocity_rad_s: float = Field(1.5, gt=0.0, description="Joint speed cap, rad/s.")
    initial_q: list[float] = Field(
        default_factory=lambda: [0.0, -0.3, 0.0, -2.2, 0.0, 1.9, 0.785],
        description="Arm joints at start, radians (the simulator's home pose).",
    )
    initial_width_m: float = Field(0.08, ge=0.0, description="Finger width at start, metres.")
    robot_file: str = Field("", description="The arm's description, as arm_adapter_node.robot_file.")
