"""The scripted stand-in VLA (policy backends `sim_scripted`, `sim_scripted_safe`).

The one part of the harness a runtime node loads: carryon_sim's setup.py registers
`sim_scripted` and `sim_scripted_safe` in the entry point group `carryon.policy_backends`,
and policy_node's backend registry imports this module when one of them is chosen (the
policy package never names the simulator). It reads simulator truth (object poses on
sim/truth, the scene files) by design, which is why it lives here and not in carryon_policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from carryon_common.core.skills import load_skill_library, skills_path
from carryon_policy.core.config import PolicyConfig
from carryon_sim.core.scene import scenes_dir
from carryon_sim.harness.stand_in.geometry import ObjectGeometry, scene_geometry, yaw_rotvec
from carryon_sim.harness.stand_in.plan import ScriptedParams
from carryon_sim.harness.stand_in.policy import ScriptedPolicy
from carryon_sim.harness.stand_in.scripts import Script, load_stand_in_scripts, stand_in_script, stand_in_scripts_path

if TYPE_CHECKING:
    from carryon_policy.core.action_mapping import Kinematics

__all__ = [
    "ObjectGeometry",
    "Script",
    "ScriptedParams",
    "ScriptedPolicy",
    "load_stand_in_scripts",
    "make_stand_in",
    "scene_geometry",
    "sim_scripted",
    "sim_scripted_safe",
    "stand_in_script",
    "stand_in_scripts_path",
    "yaw_rotvec",
]


def make_stand_in(config: PolicyConfig, *, safe: bool) -> ScriptedPolicy:
    """The stand-in a policy config describes: its scripts checked against the skill
    library (`skills_file`), object geometry from the scene files (`scenes_dir`)."""
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
    scripts = load_stand_in_scripts(stand_in_scripts_path(config.stand_in_scripts_file), library)
    geometry = scene_geometry(scenes_dir(config.scenes_dir))
    return ScriptedPolicy(scripts, geometry, params, backend="sim_scripted_safe" if safe else "sim_scripted")


# The policy backends of the entry point group carryon.policy_backends (setup.py); the first
# docstring line is the backend's description.
def sim_scripted(config: PolicyConfig, _kinematics: Kinematics | None) -> ScriptedPolicy:
    """SIMULATION HARNESS: scripted stand-in for a frozen VLA that ignores obstacles; reads simulator truth"""
    return make_stand_in(config, safe=False)


def sim_scripted_safe(config: PolicyConfig, _kinematics: Kinematics | None) -> ScriptedPolicy:
    """SIMULATION HARNESS: scripted stand-in for a safety-finetuned VLA; reads simulator truth"""
    return make_stand_in(config, safe=True)
