"""The one place where judge core types meet ROS messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import CameraInfo, Image

from carryon_common import convert as common_convert
from carryon_interfaces.msg import SegmentationLabels, SimTruth, Subtask, Verdict
from carryon_judge.core.types import CameraView, JudgeVerdict, SubtaskSpec, TruthObject, VerdictStatus


def verdict_to_msg(verdict: JudgeVerdict, stamp: TimeMsg) -> Verdict:
    msg = Verdict()
    msg.header.stamp = stamp
    msg.subtask_id = verdict.subtask_id
    msg.status = int(verdict.status)
    msg.reason = verdict.reason
    msg.revealed_contents = list(verdict.revealed_contents)
    msg.scene_update_required = verdict.scene_update_required
    msg.confidence = float(verdict.confidence)
    msg.backend = verdict.backend
    msg.observation_id = verdict.observation_id
    return msg


def verdict_from_msg(msg: Verdict) -> JudgeVerdict:
    """Raises ValueError for an unknown status."""
    return JudgeVerdict(
        subtask_id=msg.subtask_id,
        status=VerdictStatus(msg.status),
        reason=msg.reason,
        backend=msg.backend,
        revealed_contents=tuple(msg.revealed_contents),
        scene_update_required=msg.scene_update_required,
        confidence=msg.confidence,
        observation_id=msg.observation_id,
    )


def stamp_s(stamp: TimeMsg) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def subtask_from_msg(msg: Subtask) -> SubtaskSpec:
    return SubtaskSpec(
        id=msg.id, kind=msg.kind, objective=msg.objective, instruction=msg.instruction, target=msg.target,
        source=msg.source, destination=msg.destination,
    )  # fmt: skip


def pose_matrix(msg: PoseStamped) -> npt.NDArray[np.float64]:
    """4x4 homogeneous transform of a pose (world_from_frame)."""
    p, q = msg.pose.position, msg.pose.orientation
    x, y, z, w = q.x, q.y, q.z, q.w
    out = np.eye(4)
    out[:3, :3] = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ]
    out[:3, 3] = [p.x, p.y, p.z]
    return out


def intrinsics(msg: CameraInfo) -> npt.NDArray[np.float64]:
    return np.array(msg.k, dtype=np.float64).reshape(3, 3)


def labels_from_msg(msg: SegmentationLabels) -> dict[int, str]:
    if len(msg.ids) != len(msg.names):
        raise ValueError(f"label table has {len(msg.ids)} ids but {len(msg.names)} names")
    return {int(i): str(n) for i, n in zip(msg.ids, msg.names, strict=True)}


def truth_from_msg(msg: SimTruth) -> dict[str, TruthObject]:
    return {
        o.name: TruthObject(
            name=o.name,
            position=(o.pose.position.x, o.pose.position.y, o.pose.position.z),
            grasped=o.grasped,
            inside=o.inside,
            covered_by=o.covered_by,
            offstage=not o.location and o.pose.position.z < 0.2,
        )
        for o in msg.objects
    }


# The message type of each camera stream (camera/<name>/<stream>).
CAMERA_STREAM_TYPES: dict[str, Any] = {
    "color": Image, "depth": Image, "segmentation": Image, "labels": SegmentationLabels, "camera_info": CameraInfo,
    "pose": PoseStamped,
}  # fmt: skip


def camera_view(camera: str, msgs: Mapping[str, Any]) -> CameraView:
    """One camera's latest messages (stream -> message or None: color, depth, segmentation,
    labels, camera_info, pose) as a CameraView; raises ValueError for a malformed image."""

    def array(stream: str) -> Any:
        return None if msgs.get(stream) is None else common_convert.image_array(msgs[stream])

    stamps = [stamp_s(m.header.stamp) for m in msgs.values() if m is not None and hasattr(m, "header")]
    seg = array("segmentation")
    depth = array("depth")
    return CameraView(
        camera=camera, stamp_s=max(stamps) if stamps else 0.0, rgb=array("color"),
        depth=None if depth is None else depth.astype(np.float32),
        segmentation=None if seg is None else seg.astype(np.int32),
        labels={} if msgs.get("labels") is None else labels_from_msg(msgs["labels"]),
        intrinsics=None if msgs.get("camera_info") is None else intrinsics(msgs["camera_info"]),
        world_from_camera=None if msgs.get("pose") is None else pose_matrix(msgs["pose"]),
    )  # fmt: skip
