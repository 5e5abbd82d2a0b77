"""The one place where carryon_common's core types meet ROS messages."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import Vector3

from carryon_common.core.chunk import Chunk, ChunkSource, Convention, InvalidChunk
from carryon_common.core.status import Capability, NodeHealth, NodeState
from carryon_interfaces.msg import ActionChunk, ActionStep, NodeStatus
from carryon_interfaces.msg import Capability as CapabilityMsg


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
    sec = int(chunk.observation_stamp_s)
    msg.observation_stamp = TimeMsg(sec=sec, nanosec=round((chunk.observation_stamp_s - sec) * 1e9) % 1_000_000_000)
    msg.steps = [
        ActionStep(
            position=Vector3(x=float(p[0]), y=float(p[1]), z=float(p[2])),
            rotation=Vector3(x=float(r[0]), y=float(r[1]), z=float(r[2])),
            gripper=float(g),
        )
        for p, r, g in zip(chunk.positions, chunk.rotations, chunk.gripper, strict=True)
    ]
    return msg
