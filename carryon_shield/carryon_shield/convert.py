"""The one place where shield core types meet ROS messages."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Duration
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import Point, Vector3
from sensor_msgs.msg import PointCloud2, PointField
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from carryon_interfaces.msg import ShieldEvent
from carryon_shield.core.gate import Decision, ShieldDecision
from carryon_shield.core.types import FloatArray, ObstacleSet


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


def obstacle_cloud(obstacles: ObstacleSet, stamp: TimeMsg) -> PointCloud2:
    """PointCloud2 (x, y, z float32; label uint32 = index into the obstacle names) in the
    obstacle set's frame. Built with numpy (sensor_msgs_py is not always available)."""
    n = len(obstacles)
    record = np.zeros(n, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("label", "<u4")])
    record["x"], record["y"], record["z"] = obstacles.points.T if n else ([], [], [])
    record["label"] = obstacles.label_index
    msg = PointCloud2(height=1, width=n, is_bigendian=False, point_step=16, row_step=16 * n, is_dense=True)
    msg.header.stamp = stamp
    msg.header.frame_id = obstacles.frame_id
    msg.fields = [
        PointField(name="x", offset=0, datatype=PointField.FLOAT32, count=1),
        PointField(name="y", offset=4, datatype=PointField.FLOAT32, count=1),
        PointField(name="z", offset=8, datatype=PointField.FLOAT32, count=1),
        PointField(name="label", offset=12, datatype=PointField.UINT32, count=1),
    ]
    msg.data = record.tobytes()
    return msg


def cloud_points(msg: PointCloud2) -> FloatArray:
    """x, y, z (N, 3) of a cloud made by `obstacle_cloud` (for tests and tools)."""
    record = np.frombuffer(bytes(msg.data), dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("label", "<u4")])
    return np.column_stack([record["x"], record["y"], record["z"]]).astype(np.float64)


# Marker ids in the "shield" namespace: one of each per decision, replaced every chunk.
RELEASED, BLOCKED, RETREAT, NEAREST, LABEL, CARRIED = range(6)
_GREEN = ColorRGBA(r=0.1, g=0.8, b=0.2, a=1.0)
_RED = ColorRGBA(r=0.9, g=0.1, b=0.1, a=1.0)
_ORANGE = ColorRGBA(r=1.0, g=0.55, b=0.0, a=1.0)
_WHITE = ColorRGBA(r=1.0, g=1.0, b=1.0, a=1.0)
_BLUE = ColorRGBA(r=0.2, g=0.4, b=1.0, a=0.5)


def _marker(kind: int, marker_id: int, frame_id: str, stamp: TimeMsg, *, color: ColorRGBA, scale: float) -> Marker:
    m = Marker(ns="shield", id=marker_id, type=kind, action=Marker.ADD, color=color)
    m.header.frame_id = frame_id
    m.header.stamp = stamp
    m.scale = Vector3(x=scale, y=scale, z=scale)
    m.pose.orientation.w = 1.0
    m.lifetime = Duration(sec=2)
    return m


def _points(array: FloatArray) -> list[Point]:
    return [Point(x=float(p[0]), y=float(p[1]), z=float(p[2])) for p in array]


def decision_markers(decision: ShieldDecision, stamp: TimeMsg) -> MarkerArray:
    """What an operator watches in rviz: the predicted tool path of the chunk (green:
    released, red: held back), the retreat (orange), the nearest obstacle point at the
    first blocked step (red sphere) and the decision as text. Markers with nothing to
    show are deleted, so the display always matches the latest decision."""
    frame = decision.frame_id or "world"
    path = decision.predicted_path if decision.predicted_path is not None else np.zeros((0, 3))
    split = decision.released_steps if decision.decision in (Decision.RELEASED_ALL, Decision.RELEASED_PREFIX) else 0
    if decision.would_block:  # disabled shield: show what it would have held back
        split = max(decision.first_blocked_step, 0)
    segments = {
        RELEASED: (path[: split + 1] if split < len(path) else path[:split], _GREEN),
        BLOCKED: (path[split:] if split < len(path) else np.zeros((0, 3)), _RED),
        RETREAT: (decision.retreat_path if decision.retreat_path is not None else np.zeros((0, 3)), _ORANGE),
    }
    out = MarkerArray()
    for marker_id, (points, color) in segments.items():
        marker = _marker(Marker.LINE_STRIP, marker_id, frame, stamp, color=color, scale=0.006)
        if len(points) >= 2:
            marker.points = _points(points)
        else:
            marker.action = Marker.DELETE
        out.markers.append(marker)
    nearest = _marker(Marker.SPHERE_LIST, NEAREST, frame, stamp, color=_RED, scale=0.02)
    if decision.nearest_points is not None and len(decision.nearest_points):
        nearest.points = _points(decision.nearest_points)
    else:
        nearest.action = Marker.DELETE
    out.markers.append(nearest)
    label = _marker(Marker.TEXT_VIEW_FACING, LABEL, frame, stamp, color=_WHITE, scale=0.03)
    if len(path):
        label.pose.position = Point(x=float(path[0][0]), y=float(path[0][1]), z=float(path[0][2]) + 0.12)
        label.text = f"{decision.decision.name.lower()} {decision.released_steps}/{decision.total_steps}"
    else:
        label.action = Marker.DELETE
    out.markers.append(label)
    out.markers.extend(arm_markers(decision.arm_spheres, frame, stamp))
    return out


ARM_MARKERS = 96  # ids 0.. in namespace "shield_arm": the arm's spheres of a blocked configuration
_PURPLE = ColorRGBA(r=0.7, g=0.2, b=0.9, a=0.35)


def arm_markers(spheres: FloatArray | None, frame_id: str, stamp: TimeMsg) -> list[Marker]:
    """The arm's spheres (S, 4, world) at the first configuration a link blocked, translucent
    purple, one sphere marker each (their radii differ); the ids not used are deleted."""
    shown = spheres if spheres is not None else np.zeros((0, 4))
    markers = []
    for index in range(ARM_MARKERS):
        marker = _marker(Marker.SPHERE, index, frame_id, stamp, color=_PURPLE, scale=0.0)
        marker.ns = "shield_arm"
        if index < len(shown):
            x, y, z, r = (float(v) for v in shown[index])
            marker.pose.position = Point(x=x, y=y, z=z)
            marker.scale = Vector3(x=2 * r, y=2 * r, z=2 * r)
        else:
            marker.action = Marker.DELETE
        markers.append(marker)
    return markers


def carried_marker(spheres: FloatArray, frame_id: str, stamp: TimeMsg) -> Marker:
    """The carried object as the shield models it: its spheres (S, 4: centre x, y, z and
    radius, world frame) as a translucent blue sphere list; deleted when nothing is held."""
    radius = float(spheres[:, 3].max()) if len(spheres) else 0.0
    marker = _marker(Marker.SPHERE_LIST, CARRIED, frame_id or "world", stamp, color=_BLUE, scale=2.0 * radius)
    if len(spheres):
        marker.points = _points(spheres[:, :3])
    else:
        marker.action = Marker.DELETE
    return marker
