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
    cameras: list[str] = Field(
        default_factory=lambda: ["scene", "wrist"],
        description="Cameras whose depth + masks re-localise the target (camera/<name>/...).",
    )
    speed_m_s: float = Field(0.12, gt=0.0, le=0.5, description="Tool speed of recovery motions, m/s.")
    tolerance_m: float = Field(0.015, gt=0.0, description="A motion counts as reached within this distance, m.")
    attempts_file: str = Field(
        "",
        description="Append every attempt's record here as JSON lines, for `carryon reflect --attempts` "
        "('' = recovery_attempts.jsonl in the run folder of `carryon up`, else in the working directory).",
    )
