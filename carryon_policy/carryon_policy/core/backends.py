"""Policy backends by name (the `backend` parameter of policy_node).

Factories import heavy dependencies lazily: `lerobot_local` needs the optional LeRobot
extra (torch), `openpi_remote` only websockets + msgpack, the stand-ins MuJoCo scene files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carryon_common.core.registry import Registry
from carryon_policy.core.adapters import Kinematics
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.policy import Policy

if TYPE_CHECKING:
    from carryon_arm.core.kinematics import ArmKinematics


@dataclass(frozen=True)
class Backend:
    name: str
    description: str
    make: Callable[[PolicyConfig, Kinematics | None], Policy]


BACKENDS: Registry[Backend] = Registry("policy backend")


def _scripted(safe: bool) -> Callable[[PolicyConfig, Kinematics | None], Policy]:
    def make(config: PolicyConfig, _kinematics: Kinematics | None) -> Policy:
        from carryon_policy.core.scripted import ScriptedParams, ScriptedPolicy
        from carryon_policy.core.sim_geometry import scene_geometry
        from carryon_policy.core.skills import load_skill_library, skills_path
        from carryon_sim.core.scene import scenes_dir

        params = ScriptedParams(
            dt=1.0 / config.control_rate_hz,
            horizon=config.chunk_horizon,
            speed_m_s=config.scripted_speed_m_s,
            noise_m=config.scripted_noise_m,
            grasp_error_m=config.scripted_grasp_error_m,
            drop_probability=config.scripted_drop_probability,
            slip_probability=config.scripted_slip_probability,
            stuck_probability=config.scripted_stuck_probability,
            avoid_fraction=config.scripted_avoid_fraction if safe else None,
        )
        library = load_skill_library(skills_path(config.skills_file))
        geometry = scene_geometry(scenes_dir(config.scenes_dir))
        return ScriptedPolicy(library, geometry, params, backend="sim_scripted_safe" if safe else "sim_scripted")

    return make


def _openpi(config: PolicyConfig, kinematics: Kinematics | None) -> Policy:
    from carryon_policy.core.openpi_client import make_openpi_policy

    return make_openpi_policy(config, kinematics)


def _lerobot(config: PolicyConfig, kinematics: Kinematics | None) -> Policy:
    from carryon_policy.core.lerobot_policy import make_lerobot_policy

    return make_lerobot_policy(config, kinematics)


for _backend in (
    Backend(
        "sim_scripted", "scripted stand-in for a frozen VLA that ignores obstacles (simulation only)", _scripted(False)
    ),
    Backend("sim_scripted_safe", "scripted stand-in for a safety-finetuned VLA (simulation only)", _scripted(True)),
    Backend("openpi_remote", "a pi0 / pi0.5 (or any openpi) policy server over websocket + msgpack", _openpi),
    Backend("lerobot_local", "a LeRobot policy from a local folder (optional extra: torch, lerobot)", _lerobot),
):
    BACKENDS.register(_backend.name, _backend)


def kinematics_for(config: PolicyConfig) -> ArmKinematics | None:
    """The arm's forward kinematics (Pinocchio, from `robot_file`) when the VLA's actions are
    joint targets (vla_action_convention joint_*); None otherwise, or for the stand-ins."""
    if config.backend.startswith("sim_scripted") or not config.vla_action_convention.startswith("joint_"):
        return None
    from carryon_arm.core.kinematics import load_robot

    return load_robot(config.robot_file).kinematics()


def make_policy(config: PolicyConfig, kinematics: Kinematics | None = None) -> Policy:
    """The backend named by `config.backend`, built from `config` (with `kinematics_for(config)`
    unless `kinematics` is given)."""
    return BACKENDS.get(config.backend).make(config, kinematics if kinematics is not None else kinematics_for(config))
