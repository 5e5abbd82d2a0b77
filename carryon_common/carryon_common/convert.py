"""The one place where carryon_common's core types meet ROS messages."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import Point, PoseStamped, Quaternion, Vector3
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64

from carryon_common.core import message_checks, message_fields
from carryon_common.core.chunk import WORLD_FRAME, Chunk, InvalidChunk
from carryon_common.core.clouds import CameraView
from carryon_common.core.status import Capability, NodeHealth, NodeState
from carryon_common.core.subtask import Subtask, SubtaskKind
from carryon_interfaces.msg import ActionChunk, ActionStep, NodeStatus, PlanState, SegmentationLabels, SubtaskState
from carryon_interfaces.msg import Capability as CapabilityMsg
from carryon_interfaces.msg import Subtask as SubtaskMsg


def time_to_msg(seconds: float) -> TimeMsg:
    """Seconds (>= 0) as builtin_interfaces/Time."""
    seconds = max(0.0, seconds)
    sec = math.floor(seconds)
    nanosec = min(round((seconds - sec) * 1e9), 999_999_999)
    return TimeMsg(sec=sec, nanosec=nanosec)


def time_from_msg(msg: TimeMsg) -> float:
    return message_fields.seconds(msg)


def health_to_msg(health: NodeHealth, stamp: TimeMsg) -> NodeStatus:
    msg = NodeStatus()
    msg.header.stamp = stamp
    msg.node_name = health.node_name
    msg.pid = health.pid
    msg.state = int(health.state)
    msg.ready = health.ready
    msg.message = health.message
    msg.uptime_s = float(health.uptime_s)
    msg.version = health.version
    msg.backends = list(health.backends)
    msg.profile = health.profile
    msg.capabilities = [
        CapabilityMsg(name=c.name, implemented=c.implemented, detail=c.detail) for c in health.capabilities
    ]
    return msg


def msg_to_health(msg: NodeStatus) -> NodeHealth:
    try:
        state = NodeState(msg.state)
    except ValueError:
        state = NodeState.ERROR
    return NodeHealth(
        node_name=msg.node_name,
        pid=msg.pid,
        state=state,
        message=msg.message,
        uptime_s=msg.uptime_s,
        version=msg.version,
        backends=tuple(msg.backends),
        profile=msg.profile,
        capabilities=tuple(Capability(c.name, c.implemented, c.detail) for c in msg.capabilities),
    )


def chunk_from_msg(msg: ActionChunk) -> Chunk:
    """ActionChunk message -> core Chunk. Raises InvalidChunk naming the field for a malformed
    message (every field checked: message_checks.check_fields) and unknown enum values."""
    try:
        message_checks.check_fields(msg, message_checks.limits_for(ActionChunk))
    except InvalidChunk:
        raise
    except ValueError as exc:
        raise InvalidChunk(str(exc)) from None
    return message_fields.chunk_from_fields(msg)


def chunk_to_msg(chunk: Chunk, stamp: TimeMsg) -> ActionChunk:
    """Core Chunk -> ActionChunk message stamped `stamp`."""
    msg = ActionChunk()
    msg.header.stamp = stamp
    msg.header.frame_id = chunk.frame_id
    msg.chunk_id = chunk.chunk_id
    msg.subtask_id = chunk.subtask_id
    msg.source = int(chunk.source)
    msg.convention = int(chunk.convention)
    msg.dt = chunk.dt
    msg.observation_id = chunk.observation_id
    msg.observation_stamp = time_to_msg(chunk.observation_stamp_s)
    msg.steps = [
        ActionStep(
            position=Vector3(x=float(p[0]), y=float(p[1]), z=float(p[2])),
            rotation=Vector3(x=float(r[0]), y=float(r[1]), z=float(r[2])),
            gripper=float(g),
        )
        for p, r, g in zip(chunk.positions, chunk.rotations, chunk.gripper, strict=True)
    ]
    return msg


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


def pose_msg(
    position: npt.NDArray[np.float64], rotation: npt.NDArray[np.float64], stamp: TimeMsg, frame_id: str = WORLD_FRAME
) -> PoseStamped:
    msg = PoseStamped()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    msg.pose.position = Point(x=float(position[0]), y=float(position[1]), z=float(position[2]))
    msg.pose.orientation = matrix_to_quaternion(rotation)
    return msg


def joint_positions(msg: JointState, names: Sequence[str]) -> npt.NDArray[np.float64] | None:
    """Positions of `names` from a joint state, radians or metres (None when one is missing).
    Raises InvalidMessage for names and positions that differ in count, a name listed twice
    or a position that is not finite (message_checks.check_joint_state)."""
    message_checks.check_joint_state(msg.name, msg.position)
    index = {name: i for i, name in enumerate(msg.name)}
    if any(name not in index for name in names):
        return None
    return np.array([msg.position[index[name]] for name in names], dtype=np.float64)


def joint_state_msg(names: list[str], positions: npt.NDArray[np.float64], stamp: TimeMsg) -> JointState:
    msg = JointState(name=names, position=[float(p) for p in positions])
    msg.header.stamp = stamp
    return msg


def image_array(msg: Image) -> npt.NDArray[Any]:
    """rgb8 / bgr8 -> (H, W, 3) RGB uint8; 32FC1 / 32SC1 / 16UC1 / ... -> (H, W).
    Raises InvalidMessage (a ValueError) for other encodings or sizes that do not match."""
    return message_fields.image_from_fields(msg)


def image_msg(array: npt.NDArray[np.generic], encoding: str, frame_id: str, stamp: TimeMsg) -> Image:
    """(H, W, 3) uint8 as rgb8, or (H, W) as a one-channel encoding (32FC1, 32SC1, ...)."""
    msg = Image(height=array.shape[0], width=array.shape[1], encoding=encoding, is_bigendian=0)
    contiguous = np.ascontiguousarray(array)
    msg.step = contiguous.strides[0]
    msg.data = contiguous.tobytes()
    msg.header.stamp = stamp
    msg.header.frame_id = frame_id
    return msg


def labels_msg(labels: Mapping[int, str], header: Any) -> SegmentationLabels:
    """The label table of a segmentation image, with that image's header."""
    msg = SegmentationLabels(ids=[int(i) for i in labels], names=[str(n) for n in labels.values()])
    msg.header = header
    return msg


def subtask_to_msg(subtask: Subtask) -> SubtaskMsg:
    return SubtaskMsg(
        id=subtask.id,
        kind=subtask.kind.value,
        objective=subtask.objective,
        instruction=subtask.instruction,
        target=subtask.target,
        source=subtask.source,
        destination=subtask.destination,
        depends_on=list(subtask.depends_on),
        condition=subtask.condition,
    )


def subtask_from_msg(msg: SubtaskMsg) -> Subtask:
    """Raises ValueError for an unknown kind (the message names it)."""
    try:
        kind = SubtaskKind(msg.kind)
    except ValueError:
        valid = ", ".join(k.value for k in SubtaskKind)
        raise ValueError(f"subtask {msg.id!r}: unknown kind {msg.kind!r} (one of {valid})") from None
    return Subtask(
        id=msg.id,
        kind=kind,
        objective=msg.objective,
        instruction=msg.instruction,
        target=msg.target,
        source=msg.source,
        destination=msg.destination,
        depends_on=tuple(msg.depends_on),
        condition=msg.condition,
    )


def pose_matrix(msg: PoseStamped) -> npt.NDArray[np.float64]:
    """4x4 homogeneous transform of a pose (world_from_frame), metres; the quaternion is
    normalised. Raises InvalidMessage for a position that is not finite (or beyond
    message_checks.MAX_ABS) and a quaternion that is not a rotation (norm far from 1)."""
    p, q = msg.pose.position, msg.pose.orientation
    message_checks.check_numbers([p.x, p.y, p.z], "pose.position")
    x, y, z, w = message_checks.check_quaternion(q.x, q.y, q.z, q.w, "pose.orientation")
    out = np.eye(4)
    out[:3, :3] = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ]
    out[:3, 3] = [p.x, p.y, p.z]
    return out


def intrinsics(msg: CameraInfo) -> npt.NDArray[np.float64]:
    """The 3x3 pinhole matrix K (pixels); InvalidMessage when it is not one (not finite,
    focal lengths not positive)."""
    return message_checks.check_intrinsics(msg.k)


def labels_from_msg(msg: SegmentationLabels) -> dict[int, str]:
    """Instance id -> name; raises InvalidMessage (a ValueError) when ids and names differ in
    count, an id is listed twice or a name is not printable text."""
    return message_checks.check_labels(msg.ids, msg.names)


# A gripper opening outside this is no measurement (metres; slightly negative: finger sensor noise).
GRIPPER_WIDTH_RANGE_M = (-0.01, 1.0)


def gripper_width(msg: Float64) -> float:
    """A measured gripper opening, metres (gripper/width); InvalidMessage outside
    GRIPPER_WIDTH_RANGE_M or not finite."""
    low, high = GRIPPER_WIDTH_RANGE_M
    return message_checks.check_number(msg.data, "gripper_width", low=low, high=high)


# The message type of each camera stream (camera/<name>/<stream>).
CAMERA_STREAM_TYPES: dict[str, Any] = {
    "color": Image,
    "depth": Image,
    "segmentation": Image,
    "labels": SegmentationLabels,
    "camera_info": CameraInfo,
    "pose": PoseStamped,
}


def camera_view(camera: str, msgs: Mapping[str, Any]) -> CameraView:
    """One camera's latest messages (stream -> message or None: color, depth, segmentation,
    labels, camera_info, pose) as a CameraView stamped with the newest of them; raises
    ValueError for a malformed image or label table."""

    def array(stream: str) -> Any:
        return None if msgs.get(stream) is None else image_array(msgs[stream])

    stamps = [time_from_msg(m.header.stamp) for m in msgs.values() if m is not None and hasattr(m, "header")]
    seg = array("segmentation")
    depth = array("depth")
    return CameraView(
        camera=camera,
        stamp_s=max(stamps) if stamps else 0.0,
        rgb=array("color"),
        depth=None if depth is None else depth.astype(np.float32),
        segmentation=None if seg is None else seg.astype(np.int32),
        labels={} if msgs.get("labels") is None else labels_from_msg(msgs["labels"]),
        intrinsics=None if msgs.get("camera_info") is None else intrinsics(msgs["camera_info"]),
        world_from_camera=None if msgs.get("pose") is None else pose_matrix(msgs["pose"]),
    )


_PLAN_STATES = {
    PlanState.STATE_PLANNING: "planning",
    PlanState.STATE_VALIDATING: "validating",
    PlanState.STATE_EXECUTING: "executing",
    PlanState.STATE_SUCCEEDED: "succeeded",
    PlanState.STATE_FAILED: "failed",
    PlanState.STATE_REFUSED: "refused",
    PlanState.STATE_CANCELLED: "cancelled",
}


def plan_state_name(state: int) -> str:
    return _PLAN_STATES.get(state, f"unknown({state})")


_SUBTASK_STATES = {
    SubtaskState.STATE_PENDING: "pending",
    SubtaskState.STATE_ACTIVE: "active",
    SubtaskState.STATE_RECOVERING: "recovering",
    SubtaskState.STATE_SUCCEEDED: "succeeded",
    SubtaskState.STATE_FAILED: "failed",
    SubtaskState.STATE_SKIPPED: "skipped",
    SubtaskState.STATE_CANCELLED: "cancelled",
}


def subtask_state_name(state: int) -> str:
    return _SUBTASK_STATES.get(state, f"unknown({state})")
