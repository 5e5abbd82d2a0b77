"""The one place where shield core types meet ROS messages."""

from __future__ import annotations

from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import Point

from carryon_interfaces.msg import ShieldEvent
from carryon_shield.core.gate import ShieldDecision


def decision_to_event(decision: ShieldDecision, stamp: TimeMsg) -> ShieldEvent:
    msg = ShieldEvent()
    msg.header.stamp = stamp
    msg.header.frame_id = decision.frame_id
    msg.chunk_id = decision.chunk_id
    msg.subtask_id = decision.subtask_id
    msg.decision = int(decision.decision)
    msg.released_steps = decision.released_steps
    msg.total_steps = decision.total_steps
    msg.min_distance_m = float(decision.min_distance_m)
    msg.threshold_m = float(decision.threshold_m)
    msg.first_blocked_step = decision.first_blocked_step
    msg.blocking_obstacle = decision.blocking_obstacle
    x, y, z = decision.blocking_point
    msg.blocking_point = Point(x=float(x), y=float(y), z=float(z))
    msg.holding = decision.holding
    msg.obstacle_points = decision.obstacle_points
    msg.compute_time_s = float(decision.compute_time_s)
    msg.reason = decision.reason
    return msg
