"""Configuration of recovery_node."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from carryon_common.core.config import one_of
from carryon_common.core.operator_auth import OperatorAuthConfig

MOTION_BACKENDS = ("builtin", "moveit_py")


class RecoveryConfig(OperatorAuthConfig):
    motion_backend: Annotated[str, one_of("motion backend", MOTION_BACKENDS)] = Field(
        "builtin",
        description="Motion backend by name: 'builtin' (Cartesian interpolation, every step checked by IK on the "
        "arm's model from robot_file) or 'moveit_py' (robot PCs with MoveIt 2: MoveIt plans the path); either "
        "way every step passes the shield.",
    )
    robot_file: str = Field(
        "",
        description="The arm's kinematic description, as arm_adapter_node.robot_file ('' = robot/panda.yaml "
        "in the config folder).",
    )
    moveit_group: str = Field("panda_arm", description="MoveIt planning group of the arm (moveit_py only).")
    moveit_base_frame: str = Field("panda_link0", description="Frame of MoveIt pose goals (moveit_py only).")
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
    locations_file: str = Field(
        "",
        description="Named locations the `look` skill goes over (planner's observe of a location no camera sees); "
        "the same file as planner_node.locations_file ('' = planner/locations.yaml).",
    )
    look_tool_height_m: float = Field(
        0.72,
        gt=0.0,
        description="World height of the tool centre point while it looks at a location, fingers down (the wrist "
        "camera then sees the region from about 0.4 m above the simulated table at 0.42 m).",
    )
