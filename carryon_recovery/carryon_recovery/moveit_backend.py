"""The `moveit_py` motion backend's link to MoveIt 2 (robot PCs with MoveIt installed).

MoveIt plans a joint path in its planning scene from the measured joints to the tool goal;
`MoveItPlanner` (core/motion.py) turns the waypoints back into tool poses, which go through
the shield like every recovery step. MoveIt is not on PyPI, so this module is not exercised
by the project's tests (MoveItPlanner is, with a stand-in planner); it follows the moveit_py
API of MoveIt 2 Jazzy (`moveit.planning.MoveItPy`, `PlanningComponent`). MoveItPy reads its
configuration (robot description, planning pipelines) from the recovery node's parameters:
start recovery_node with your MoveIt config's parameters, e.g. from
`MoveItConfigsBuilder(...).to_dict()` in a launch file.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped

from carryon_common import convert as common_convert
from carryon_common.core.errors import ConfigError
from carryon_recovery.core.motion import FloatArray, MoveItPlanner
from carryon_robot.core.kinematics import ArmKinematics


def moveit_planner(kinematics: ArmKinematics, group: str, base_frame: str, tool_frame: str) -> MoveItPlanner:
    """A MoveItPlanner backed by MoveItPy; ConfigError with the install hint when MoveIt is absent."""
    try:
        from moveit.core.robot_state import RobotState
        from moveit.planning import MoveItPy
    except ImportError as exc:
        raise ConfigError(
            f"motion_backend 'moveit_py' needs MoveIt 2's Python API ({exc}); on a robot PC: "
            "`sudo apt install ros-$ROS_DISTRO-moveit-py`, or use motion_backend 'builtin'"
        ) from None
    moveit = MoveItPy(node_name="carryon_recovery_moveit")
    component: Any = moveit.get_planning_component(group)
    model = moveit.get_robot_model()

    def plan_joints(q_start: FloatArray, position: FloatArray, rotation: FloatArray) -> tuple[FloatArray | None, str]:
        start = RobotState(model)
        start.set_joint_group_positions(group, q_start)
        start.update()
        component.set_start_state(robot_state=start)
        goal_position, goal_rotation = kinematics.tool_frame_in_base(position, rotation)
        goal: PoseStamped = common_convert.pose_msg(
            goal_position, goal_rotation, PoseStamped().header.stamp, base_frame
        )
        component.set_goal_state(pose_stamped_msg=goal, pose_link=tool_frame)
        result = component.plan()
        if not result:
            return None, "MoveIt planning failed"
        trajectory = result.trajectory.get_robot_trajectory_msg().joint_trajectory
        names = list(trajectory.joint_names)
        try:
            order = [names.index(n) for n in kinematics.joint_names]
        except ValueError:
            return None, f"MoveIt group {group!r} joints {names} differ from the robot file's {kinematics.joint_names}"
        return np.array([[p.positions[i] for i in order] for p in trajectory.points], dtype=np.float64), ""

    return MoveItPlanner(kinematics, plan_joints)
