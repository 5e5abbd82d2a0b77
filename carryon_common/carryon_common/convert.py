"""The one place where carryon_common's core types meet ROS messages."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import Point, PoseStamped, Quaternion, Vector3
from sensor_msgs.msg import Image, JointState

from carryon_common.core.chunk import WORLD_FRAME, Chunk, ChunkSource, Convention, InvalidChunk
from carryon_common.core.status import Capability, NodeHealth, NodeState
from carryon_interfaces.msg import ActionChunk, ActionStep, NodeStatus
from carryon_interfaces.msg import Capability as CapabilityMsg


def time_to_msg(seconds: float) -> TimeMsg:
    """Seconds (>= 0) as builtin_interfaces/Time."""
    seconds = max(0.0, seconds)
    sec = math.floor(seconds)
    nanosec = min(round((seconds - sec) * 1e9), 999_999_999)
    return TimeMsg(sec=sec, nanosec=nanosec)


def time_from_msg(msg: TimeMsg) -> float:
    return msg.sec + msg.nanosec * 1e-9


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
        capabilities=tuple(Capability(c.name, c.implemented, c.detail) for c in msg.capabilities),
    )


def chunk_from_msg(msg: ActionChunk) -> Chunk:
    """ActionChunk message -> core Chunk. Unknown enum values raise InvalidChunk."""
    try:
        source = ChunkSource(msg.source)
        convention = Convention(msg.convention)
    except ValueError as exc:
        raise InvalidChunk(str(exc)) from None
    steps = msg.steps
    return Chunk(
        chunk_id=int(msg.chunk_id),
        subtask_id=msg.subtask_id,
        source=source,
        convention=convention,
        frame_id=msg.header.frame_id,
        dt=float(msg.dt),
        observation_id=int(msg.observation_id),
        observation_stamp_s=msg.observation_stamp.sec + msg.observation_stamp.nanosec * 1e-9,
        positions=np.array([[s.position.x, s.position.y, s.position.z] for s in steps], dtype=np.float64).reshape(
            -1, 3
        ),
        rotations=np.array([[s.rotation.x, s.rotation.y, s.rotation.z] for s in steps], dtype=np.float64).reshape(
            -1, 3
        ),
        gripper=np.array([s.gripper for s in steps], dtype=np.float64),
    )


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
    """Positions of `names` from a joint state (None when one is missing)."""
    index = {name: i for i, name in enumerate(msg.name)}
    if any(name not in index or index[name] >= len(msg.position) for name in names):
        return None
    return np.array([msg.position[index[name]] for name in names], dtype=np.float64)


def joint_state_msg(names: list[str], positions: npt.NDArray[np.float64], stamp: TimeMsg) -> JointState:
    msg = JointState(name=names, position=[float(p) for p in positions])
    msg.header.stamp = stamp
    return msg


IMAGE_DTYPES = {"32FC1": np.float32, "32SC1": np.int32, "16UC1": np.uint16, "8UC1": np.uint8, "16SC1": np.int16}


def image_array(msg: Image) -> npt.NDArray[Any]:
    """rgb8 / bgr8 -> (H, W, 3) RGB uint8; 32FC1 / 32SC1 / 16UC1 / ... -> (H, W).
    Raises ValueError for other encodings or a size that does not match."""
    if msg.encoding in ("rgb8", "bgr8"):
        rows = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(msg.height, msg.step)
        rgb = rows[:, : msg.width * 3].reshape(msg.height, msg.width, 3)
        return np.ascontiguousarray(rgb[:, :, ::-1] if msg.encoding == "bgr8" else rgb)
    dtype = IMAGE_DTYPES.get(msg.encoding)
    if dtype is None:
        raise ValueError(f"image encoding {msg.encoding!r} is not supported (rgb8, bgr8, {', '.join(IMAGE_DTYPES)})")
    item = np.dtype(dtype).newbyteorder(">" if msg.is_bigendian else "<")
    rows = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(msg.height, msg.step)
    array = rows[:, : msg.width * item.itemsize].copy().view(item).reshape(msg.height, msg.width)
    return array.astype(dtype)
