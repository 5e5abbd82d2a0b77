"""The one place where policy core types meet ROS messages.

Action chunks convert with carryon_common.convert (shared with shield, recovery and
the driver)."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import Image as ImageMsg
from sensor_msgs.msg import JointState

from carryon_common.convert import time_from_msg
from carryon_interfaces.msg import InferenceTiming, SimTruth
from carryon_policy.core.observation import EePose, Image, Joints, Truth, quaternion_to_matrix
from carryon_policy.core.policy import ObjectPose
from carryon_policy.core.timing import InferenceRecord


def timing_to_msg(record: InferenceRecord, stamp: TimeMsg) -> InferenceTiming:
    msg = InferenceTiming()
    msg.header.stamp = stamp
    msg.chunk_id = record.chunk_id
    msg.backend = record.backend
    msg.infer_s = record.infer_s
    msg.observation_age_s = record.observation_age_s
    msg.server_infer_s = record.server_infer_s
    return msg


def ee_from_msg(msg: PoseStamped) -> EePose:
    p, q = msg.pose.position, msg.pose.orientation
    return EePose(
        stamp_s=time_from_msg(msg.header.stamp),
        position=np.array([p.x, p.y, p.z], dtype=np.float64),
        rotation=quaternion_to_matrix(np.array([q.x, q.y, q.z, q.w], dtype=np.float64)),
        frame_id=msg.header.frame_id,
    )


def joints_from_msg(msg: JointState, names: tuple[str, ...] = ()) -> Joints:
    """Positions of `names` in that order (all joints in message order when empty)."""
    if names:
        index = {name: i for i, name in enumerate(msg.name)}
        missing = [n for n in names if n not in index]
        if missing:
            raise ValueError(f"joint_states lacks {', '.join(missing)}")
        positions = np.array([msg.position[index[n]] for n in names], dtype=np.float64)
    else:
        positions = np.array(msg.position, dtype=np.float64)
    return Joints(stamp_s=time_from_msg(msg.header.stamp), positions=positions)


def image_from_msg(msg: ImageMsg) -> Image:
    """rgb8 / bgr8 images as (H, W, 3) RGB uint8; other encodings raise ValueError."""
    if msg.encoding not in ("rgb8", "bgr8"):
        raise ValueError(f"image encoding {msg.encoding!r} is not supported (rgb8, bgr8)")
    rows = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(msg.height, msg.step)
    rgb = rows[:, : msg.width * 3].reshape(msg.height, msg.width, 3)
    if msg.encoding == "bgr8":
        rgb = rgb[:, :, ::-1]
    return Image(stamp_s=time_from_msg(msg.header.stamp), rgb=np.ascontiguousarray(rgb))


def truth_from_msg(msg: SimTruth) -> Truth:
    objects = {}
    for obj in msg.objects:
        p, q = obj.pose.position, obj.pose.orientation
        objects[obj.name] = ObjectPose(
            position=np.array([p.x, p.y, p.z], dtype=np.float64), quaternion=np.array([q.w, q.x, q.y, q.z])
        )
    return Truth(stamp_s=time_from_msg(msg.header.stamp), scene=msg.scene, objects=objects)
