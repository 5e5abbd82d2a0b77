"""The one place where simulator core types meet ROS messages."""

from __future__ import annotations

from geometry_msgs.msg import Point, Pose, Quaternion

from carryon_interfaces.msg import ObjectState
from carryon_sim.core.types import ObjectTruth


def object_to_msg(obj: ObjectTruth) -> ObjectState:
    x, y, z = obj.position
    qw, qx, qy, qz = obj.quaternion
    return ObjectState(
        name=obj.name,
        pose=Pose(position=Point(x=x, y=y, z=z), orientation=Quaternion(w=qw, x=qx, y=qy, z=qz)),
        location=obj.location,
        grasped=obj.grasped,
        in_contact=obj.in_contact,
    )


def object_from_msg(msg: ObjectState) -> ObjectTruth:
    p, q = msg.pose.position, msg.pose.orientation
    return ObjectTruth(
        name=msg.name,
        position=(p.x, p.y, p.z),
        quaternion=(q.w, q.x, q.y, q.z),
        location=msg.location,
        grasped=msg.grasped,
        in_contact=msg.in_contact,
    )
