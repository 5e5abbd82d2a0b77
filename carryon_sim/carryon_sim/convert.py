"""The one place where simulator core types meet ROS messages."""

from __future__ import annotations

from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import Point, Pose, PoseStamped, Quaternion
from sensor_msgs.msg import CameraInfo, Image

from carryon_common.convert import WORLD_FRAME, image_msg, labels_msg, pose_msg
from carryon_interfaces.msg import ObjectState, SegmentationLabels
from carryon_sim.core.cameras import CameraFrame
from carryon_sim.core.types import ObjectTruth

__all__ = ["WORLD_FRAME", "camera_msgs", "object_from_msg", "object_to_msg"]


def object_to_msg(obj: ObjectTruth) -> ObjectState:
    x, y, z = obj.position
    qw, qx, qy, qz = obj.quaternion
    return ObjectState(
        name=obj.name,
        pose=Pose(position=Point(x=x, y=y, z=z), orientation=Quaternion(w=qw, x=qx, y=qy, z=qz)),
        location=obj.location,
        grasped=obj.grasped,
        in_contact=obj.in_contact,
        inside=obj.inside,
        covered_by=obj.covered_by,
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
        inside=msg.inside,
        covered_by=msg.covered_by,
    )


def camera_msgs(
    frame: CameraFrame, frame_id: str, stamp: TimeMsg
) -> tuple[Image, Image, Image, SegmentationLabels, CameraInfo, PoseStamped]:
    """color (rgb8), depth (32FC1, metres), segmentation (32SC1), labels, CameraInfo, pose of the optical frame."""
    color = image_msg(frame.rgb, "rgb8", frame_id, stamp)
    depth = image_msg(frame.depth, "32FC1", frame_id, stamp)
    segmentation = image_msg(frame.segmentation, "32SC1", frame_id, stamp)
    labels = labels_msg(frame.labels, segmentation.header)
    info = CameraInfo(height=frame.rgb.shape[0], width=frame.rgb.shape[1], distortion_model="plumb_bob")
    info.header = color.header
    info.k = [float(v) for v in frame.K.ravel()]
    info.d = [0.0] * 5
    info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    info.p = [
        float(frame.K[0, 0]),
        0.0,
        float(frame.K[0, 2]),
        0.0,
        0.0,
        float(frame.K[1, 1]),
        float(frame.K[1, 2]),
        0.0,
        0.0,
        0.0,
        1.0,
        0.0,
    ]
    pose = pose_msg(frame.world_from_camera[:3, 3], frame.world_from_camera[:3, :3], stamp)
    return color, depth, segmentation, labels, info, pose
