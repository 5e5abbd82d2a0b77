"""The one place where simulator core types meet ROS messages."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import Point, Pose, PoseStamped, Quaternion
from sensor_msgs.msg import CameraInfo, Image, JointState

from carryon_interfaces.msg import ObjectState, SegmentationLabels
from carryon_sim.core.cameras import CameraFrame
from carryon_sim.core.types import ObjectTruth

WORLD_FRAME = "world"


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


def matrix_to_quaternion(rotation: npt.NDArray[np.float64]) -> Quaternion:
    """3x3 rotation matrix -> geometry_msgs/Quaternion (Shepperd's method)."""
    m = rotation
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > 0:
        s = 2.0 * np.sqrt(trace + 1.0)
        w, x, y, z = 0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        w, x, y, z = (m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        w, x, y, z = (m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s
    else:
        s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        w, x, y, z = (m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s
    return Quaternion(w=float(w), x=float(x), y=float(y), z=float(z))


def pose_msg(position: npt.NDArray[np.float64], rotation: npt.NDArray[np.float64], stamp: TimeMsg) -> PoseStamped:
    msg = PoseStamped()
    msg.header.stamp = stamp
    msg.header.frame_id = WORLD_FRAME
    msg.pose.position = Point(x=float(position[0]), y=float(position[1]), z=float(position[2]))
    msg.pose.orientation = matrix_to_quaternion(rotation)
    return msg


def joint_state_msg(names: list[str], positions: npt.NDArray[np.float64], stamp: TimeMsg) -> JointState:
    msg = JointState(name=names, position=[float(p) for p in positions])
    msg.header.stamp = stamp
    return msg


def _image(array: npt.NDArray[np.generic], encoding: str, frame_id: str, stamp: TimeMsg) -> Image:
    msg = Image(height=array.shape[0], width=array.shape[1], encoding=encoding, is_bigendian=0)
    msg.step = array.strides[0]
    msg.data = np.ascontiguousarray(array).tobytes()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    return msg


def camera_msgs(
    frame: CameraFrame, frame_id: str, stamp: TimeMsg
) -> tuple[Image, Image, Image, SegmentationLabels, CameraInfo, PoseStamped]:
    """color (rgb8), depth (32FC1, metres), segmentation (32SC1), labels, CameraInfo, pose of the optical frame."""
    color = _image(frame.rgb, "rgb8", frame_id, stamp)
    depth = _image(frame.depth, "32FC1", frame_id, stamp)
    segmentation = _image(frame.segmentation, "32SC1", frame_id, stamp)
    labels = SegmentationLabels(ids=list(frame.labels), names=list(frame.labels.values()))
    labels.header = segmentation.header
    info = CameraInfo(height=frame.rgb.shape[0], width=frame.rgb.shape[1], distortion_model="plumb_bob")
    info.header = color.header
    info.k = [float(v) for v in frame.K.ravel()]
    info.d = [0.0] * 5
    info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    info.p = [float(frame.K[0, 0]), 0.0, float(frame.K[0, 2]), 0.0, 0.0, float(frame.K[1, 1]), float(frame.K[1, 2]),
              0.0, 0.0, 0.0, 1.0, 0.0]  # fmt: skip
    pose = pose_msg(frame.world_from_camera[:3, 3], frame.world_from_camera[:3, :3], stamp)
    return color, depth, segmentation, labels, info, pose
