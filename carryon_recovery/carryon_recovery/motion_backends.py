"""Recovery's motion backends by name (`motion_backend`), with the closest name suggested
on a typo. `builtin` is pure Python (core/motion.py); `moveit_py` needs MoveIt 2's Python
API and is imported only when chosen (moveit_backend.py)."""

from __future__ import annotations

from collections.abc import Callable

from carryon_common.core.registry import Registry
from carryon_recovery.core.config import RecoveryConfig
from carryon_recovery.core.motion import MotionBackend, builtin_motion
from carryon_robot.core.kinematics import RobotDescription

MotionFactory = Callable[[RobotDescription, RecoveryConfig], MotionBackend]
MOTION_BACKENDS: Registry[MotionFactory] = Registry("motion backend")


def _builtin(robot: RobotDescription, _config: RecoveryConfig) -> MotionBackend:
    return builtin_motion(robot)


def _moveit_py(robot: RobotDescription, config: RecoveryConfig) -> MotionBackend:
    from carryon_recovery.moveit_backend import moveit_planner

    return moveit_planner(robot.kinematics(), config.moveit_group, config.moveit_base_frame, robot.tool_frame)


MOTION_BACKENDS.register("builtin", _builtin)
MOTION_BACKENDS.register("moveit_py", _moveit_py)


def make_motion(robot: RobotDescription, config: RecoveryConfig) -> MotionBackend:
    """The configured backend for `robot`; UnknownNameError (with a suggestion) for an unknown name."""
    return MOTION_BACKENDS.get(config.motion_backend)(robot, config)
