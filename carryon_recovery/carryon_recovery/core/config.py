"""Configuration of recovery_node."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from carryon_common.core.config import NodeConfig, one_of

MOTION_BACKENDS = ("builtin", "moveit_py")


class RecoveryConfig(NodeConfig):
    motion_backend: Annotated[str, one_of("motion backend", MOTION_BACKENDS)] = Field(
        "builtin",
        description="Motion backend by name: 'builtin' (IK + Cartesian interpolation, every step shielded) "
        "or 'moveit_py' (robot PCs with MoveIt).",
    )
    skills_dir: str = Field(
        "",
        description="Versioned recovery skill library (<skill>/vN.yaml; '' = <config dir>/skills/recovery).",
    )
    default_skill: str = Field("regrasp", description="Skill run when a Recover goal names none.")
    max_attempts: int = Field(2, ge=1, description="Recovery attempts per failed subtask.")
