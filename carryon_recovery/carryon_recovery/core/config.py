"""Configuration of recovery_node."""

from __future__ import annotations

from pydantic import Field, field_validator

from carryon_common.core.config import NodeConfig, check_name

MOTION_BACKENDS = ("builtin", "moveit_py")


class RecoveryConfig(NodeConfig):
    motion_backend: str = Field(
        "builtin",
        description="Motion backend by name: 'builtin' (IK + Cartesian interpolation, every step shielded) "
        "or 'moveit_py' (robot PCs with MoveIt).",
    )
    skills_dir: str = Field(
        "skills/recovery",
        description="Versioned recovery skill library (skill/vN.yaml); relative to the working directory.",
    )
    default_skill: str = Field("regrasp", description="Skill run when a Recover goal names none.")
    max_attempts: int = Field(2, ge=1, description="Recovery attempts per failed subtask.")

    @field_validator("motion_backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        return check_name("motion backend", value, MOTION_BACKENDS)
