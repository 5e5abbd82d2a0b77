"""The one place where the arm adapter's core types meet ROS messages."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from builtin_interfaces.msg import Duration
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from carryon_arm.core.executor import Command
from carryon_common import convert as common_convert


def duration(seconds: float) -> Duration:
    return Duration(sec=int(seconds), nanosec=int((seconds % 1.0) * 1e9))


def trajectory_msg(joint_names: Sequence[str], command: Command) -> JointTrajectory:
    """One point, reached `command.duration_s` after receipt (zero velocity when holding)."""
    point = JointTrajectoryPoint(positions=[float(v) for v in command.q], time_from_start=duration(command.duration_s))
    if command.hold:
        point.velocities = [0.0] * len(command.q)
    return JointTrajectory(joint_names=list(joint_names), points=[point])


def rgb_msg(msg: Image) -> Image:
    """rgb8 as it is; bgr8 reordered to rgb8 (what the graph reads)."""
    if msg.encoding != "bgr8":
        return msg
    rgb = common_convert.image_array(msg)
    out = Image(header=msg.header, height=msg.height, width=msg.width, encoding="rgb8", is_bigendian=0)
    out.step, out.data = msg.width * 3, rgb.tobytes()
    return out


def depth_msg(header: Header, metres: npt.NDArray[np.float32]) -> Image:
    """32FC1 depth in metres."""
    height, width = metres.shape
    out = Image(header=header, height=height, width=width, encoding="32FC1", is_bigendian=0)
    out.step, out.data = width * 4, np.ascontiguousarray(metres, dtype=np.float32).tobytes()
    return out
