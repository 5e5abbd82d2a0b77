"""Message fields -> core types, read by attribute only: the same code serves rclpy's
messages (carryon_common.convert) and those rosbags deserializes from a bag
(carryon_policy.bag_dataset), so reading a bag needs no ROS installation."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from carryon_common.core import message_checks
from carryon_common.core.chunk import Chunk, ChunkSource, Convention, InvalidChunk

IMAGE_DTYPES = {"32FC1": np.float32, "32SC1": np.int32, "16UC1": np.uint16, "8UC1": np.uint8, "16SC1": np.int16}


def seconds(stamp: Any) -> float:
    """builtin_interfaces/Time -> seconds."""
    return float(stamp.sec + stamp.nanosec * 1e-9)


def nanoseconds(stamp: Any) -> int:
    """builtin_interfaces/Time -> integer nanoseconds (exact, for ordering)."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def chunk_from_fields(msg: Any) -> Chunk:
    """An ActionChunk message -> core Chunk. Unknown enum values and more steps than
    message_checks.MAX_SEQUENCE raise InvalidChunk (Chunk.validate checks the values)."""
    try:
        source = ChunkSource(msg.source)
    except ValueError as exc:
        raise InvalidChunk(f"source: {exc}") from None
    try:
        convention = Convention(msg.convention)
    except ValueError as exc:
        raise InvalidChunk(f"convention: {exc}") from None
    try:
        message_checks.check_length(msg.steps, "steps")
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
        observation_stamp_s=seconds(msg.observation_stamp),
        positions=np.array([[s.position.x, s.position.y, s.position.z] for s in steps], dtype=np.float64).reshape(
            -1, 3
        ),
        rotations=np.array([[s.rotation.x, s.rotation.y, s.rotation.z] for s in steps], dtype=np.float64).reshape(
            -1, 3
        ),
        gripper=np.array([s.gripper for s in steps], dtype=np.float64),
    )


def image_from_fields(msg: Any) -> npt.NDArray[Any]:
    """A sensor_msgs/Image: rgb8 / bgr8 -> (H, W, 3) RGB uint8; 32FC1 / 32SC1 / 16UC1 / ...
    -> (H, W). Raises InvalidMessage (a ValueError) for other encodings, sizes out of bounds
    or data that does not match them (message_checks.check_image)."""
    message_checks.check_image(msg.height, msg.width, msg.step, msg.encoding, len(msg.data))
    if msg.encoding in ("rgb8", "bgr8"):
        rows = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(msg.height, msg.step)
        rgb = rows[:, : msg.width * 3].reshape(msg.height, msg.width, 3)
        return np.ascontiguousarray(rgb[:, :, ::-1] if msg.encoding == "bgr8" else rgb)
    dtype = IMAGE_DTYPES[msg.encoding]
    item = np.dtype(dtype).newbyteorder(">" if msg.is_bigendian else "<")
    rows = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(msg.height, msg.step)
    array = rows[:, : msg.width * item.itemsize].copy().view(item).reshape(msg.height, msg.width)
    return array.astype(dtype)
