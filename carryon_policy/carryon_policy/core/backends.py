"""Policy backends by name (the `backend` parameter of policy_node).

Factories import heavy dependencies lazily: `lerobot_local` needs the optional LeRobot
extra (torch), `openpi_remote` only websockets + msgpack. The scripted stand-ins are the one
labelled exception to "no simulator in a runtime package": they read simulator truth, live
in the simulation harness (carryon_sim.harness.stand_in) and are imported only when chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carryon_common.core.registry import Registry
from carryon_policy.core.action_mapping import Kinematics
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.policy import Policy

if TYPE_CHECKING:
    from carryon_robot.core.kinematics import ArmKinematics


@dataclass(frozen=True)
class Backend:
    name: str
    description: str
    make: Callable[[PolicyConfig, Kinematics | None], Policy]


BACKENDS: Registry[Backend] = Registry("policy backend")


def _scripted(safe: bool) -> Callable[[PolicyConfig, Kinematics | None], Policy]:
    def make(config: PolicyConfig, _kinematics: Kinematics | None) -> Policy:
        # THE ONE EXCEPTION to "runtime never reads the simulator": the scripted stand-in
        # reads simulator truth by design, so it lives in the simulation harness
        # (carryon_sim) and is imported only when one of these backends is chosen.
        from carryon_sim.harness.stand_in import make_stand_in

        return make_stand_in(config, safe=safe)

    return make


def _openpi(config: PolicyConfig, kinematics: Kinematics | None) -> Policy:
    from carryon_policy.core.openpi_client import make_openpi_policy

    return make_openpi_policy(config, kinematics)


def _lerobot(config: PolicyConfig, kinematics: Kinematics | None) -> Policy:
    from carryon_policy.core.lerobot_policy import make_lerobot_policy

    return make_lerobot_policy(config, kinematics)


for _backend in (
    Backend(
        "sim_scripted",
        "SIMULATION HARNESS: scripted stand-in for a frozen VLA that ignores obstacles; reads simulator truth",
        _scripted(False),
    ),
    Backend(
        "sim_scripted_safe",
        "SIMULATION HARNESS: scripted stand-in for a safety-finetuned VLA; reads simulator truth",
        _scripted(True),
    ),
    Backend("openpi_remote", "a pi0 / pi0.5 (or any openpi) policy server over websocket + msgpack", _openpi),
    Backend("lerobot_local", "a LeRobot policy from a local folder (optional extra: torch, lerobot)", _lerobot),
):
    BACKENDS.register(_backend.name, _backend)


def kinematics_for(config: PolicyConfig) -> ArmKinematics | None:
    """The arm's forward kinematics (Pinocchio, from `robot_file`) when the VLA's actions are
    joint targets (vla_action_convention joint_*); None otherwise, or for the stand-ins."""
    if config.backend.startswith("sim_scripted") or not config.vla_action_convention.startswith("joint_"):
        return None
    from carryon_robot.core.kinematics import load_robot

    return load_robot(config.robot_file).kinematics()


def make_policy(config: PolicyConfig, kinematics: Kinematics | None = None) -> Policy:
    """The backend named by `config.backend`, built from `config` (with `kinematics_for(config)`
    unless `kinematics` is given)."""
    return BACKENDS.get(config.backend).make(config, kinematics if kinematics is not None else kinematics_for(config))
