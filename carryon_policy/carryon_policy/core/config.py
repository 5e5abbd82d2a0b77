"""Configuration of policy_node."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from carryon_common.core.operator_auth import OperatorAuthConfig
from carryon_common.core.registry import unknown_name_message
from carryon_policy.core.backends import BACKENDS
from carryon_policy.core.remote_config import RemoteBackendConfig


def _known_backend(name: str) -> str:
    """A backend built into carryon_policy or registered by an installed package's entry point
    (`carryon.policy_backends`); an unknown name lists the valid ones and suggests the closest."""
    if name not in BACKENDS:
        raise ValueError(unknown_name_message(BACKENDS.kind, name, BACKENDS.names()))
    return name


class PolicyConfig(RemoteBackendConfig, OperatorAuthConfig):
    backend: Annotated[str, AfterValidator(_known_backend)] = Field(
        "sim_scripted",
        description="Policy backend by name: 'openpi_remote', 'lerobot_local', or one an installed package "
        "registers (entry point group carryon.policy_backends), e.g. the simulation harness's 'sim_scripted' "
        "(scripted stand-in for a frozen VLA) and 'sim_scripted_safe' (stand-in for a safety-finetuned VLA).",
    )
    control_rate_hz: float = Field(20.0, gt=0.0, le=1000.0, description="Rate at which chunk steps execute, Hz.")
    chunk_horizon: int = Field(16, ge=1, description="Steps per inferred chunk.")
    steps_per_inference: int = Field(
        8, ge=1, description="Steps executed before the next inference (<= chunk_horizon)."
    )
    default_step_budget: int = Field(400, ge=1, description="Step budget when a RunPolicy goal gives 0.")
    cameras: list[str] = Field(
        default_factory=lambda: ["scene", "wrist"],
        description="Robot cameras whose latest colour images go into each observation (camera/<name>/color).",
    )
    max_observation_age_s: float = Field(
        0.5, gt=0.0, description="No inference from robot state or images older than this, seconds (node clock)."
    )
    observation_timeout_s: float = Field(
        5.0, gt=0.0, description="A goal fails when no fresh observation arrived for this long, seconds."
    )
    max_step_m: float = Field(
        0.05,
        gt=0.0,
        description="Largest translation between consecutive chunk steps; a larger one drops the chunk, metres.",
    )
    max_step_rad: float = Field(
        0.5,
        gt=0.0,
        description="Largest rotation between consecutive chunk steps; a larger one drops the chunk, radians.",
    )
    chunk_send_priority: int = Field(
        0,
        ge=0,
        le=99,
        description="SCHED_FIFO priority of the thread while it sends a chunk (0 = ordinary): the model runs at "
        "ordinary priority, the send does not wait behind the rest of the machine (docs/robot.md). Needs the "
        "rtprio privilege; without it chunks go out at ordinary priority and the status says so.",
    )
    seed: int = Field(0, ge=0, description="Seed of the stand-in's noise and failures (each goal adds its count).")
    robot_file: str = Field(
        "",
        description="The arm's kinematic description, as arm_adapter_node.robot_file ('' = robot/panda.yaml in the "
        "config folder): with a joint-space vla_action_convention its forward kinematics turn joint targets into "
        "tool poses, and its joint_names order the joint positions the VLA reads.",
    )
    skills_file: str = Field(
        "",
        description="Skill library YAML ('' = <config dir>/skills/library.yaml, config dir from $CARRYON_CONFIG_DIR).",
    )
    scenes_dir: str = Field(
        "", description="Scene folder the stand-in reads object geometry from ('' = <config dir>/scenes)."
    )
    stand_in_scripts_file: str = Field(
        "",
        description="The stand-in's motion per instruction ('' = <config dir>/sim/stand_in_scripts.yaml); an "
        "instruction without a script is refused when asked.",
    )
    scripted_speed_m_s: float = Field(0.2, gt=0.0, le=1.0, description="Stand-in's end-effector speed, m/s.")
    scripted_noise_m: float = Field(
        0.002, ge=0.0, le=0.05, description="Stand-in's per-step position noise (standard deviation), metres."
    )
    scripted_grasp_error_m: float = Field(
        0.003, ge=0.0, le=0.05, description="Stand-in's per-episode grasp-point error (standard deviation), metres."
    )
    scripted_drop_probability: float = Field(
        0.01, ge=0.0, le=1.0, description="Chance per episode that the stand-in opens its gripper while carrying."
    )
    scripted_slip_probability: float = Field(
        0.01, ge=0.0, le=1.0, description="Chance per episode of a grasp too high on the object, so it slips out."
    )
    scripted_stuck_probability: float = Field(
        0.005, ge=0.0, le=1.0, description="Chance per episode that the stand-in stops making progress (dithers)."
    )
    scripted_avoid_fraction: float = Field(
        0.6,
        ge=0.0,
        le=1.0,
        description="sim_scripted_safe only: fraction of obstacles on its path that it detours around.",
    )

    @model_validator(mode="after")
    def _steps_within_horizon(self) -> PolicyConfig:
        if self.steps_per_inference > self.chunk_horizon:
            raise ValueError(
                f"steps_per_inference ({self.steps_per_inference}) must not exceed chunk_horizon ({self.chunk_horizon})"
            )
        return self
