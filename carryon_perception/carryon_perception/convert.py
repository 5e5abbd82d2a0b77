"""The one place where perception's core types meet ROS messages."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import Point, Vector3
from sensor_msgs.msg import Image, JointState

from carryon_common.convert import image_msg, labels_msg
from carryon_interfaces.msg import PerceivedObject as PerceivedObjectMsg
from carryon_interfaces.msg import PerceivedScene, ReferenceImage, SegmentationLabels
from carryon_interfaces.msg import SupportPlane as SupportPlaneMsg
from carryon_perception.core import references
from carryon_perception.core.types import CameraSegmentation, FloatArray, PerceivedObject, SupportPlane

WORLD_FRAME = "world"


def joints_from_msg(msg: JointState) -> dict[str, float]:
    """Joint name -> position (radians or metres); names without a position are left out."""
    return {str(n): float(p) for n, p in zip(msg.name, msg.position, strict=False)}


def segmentation_msgs(
    segmentation: CameraSegmentation, frame_id: str, stamp: TimeMsg
) -> tuple[Image, SegmentationLabels]:
    """The instance image (32SC1) and its label table, stamped like the depth they came from."""
    image = image_msg(segmentation.instances.astype(np.int32), "32SC1", frame_id, stamp)
    return image, labels_msg(segmentation.labels, image.header)


def _point(xyz: FloatArray) -> Point:
    return Point(x=float(xyz[0]), y=float(xyz[1]), z=float(xyz[2]))


def voxel_points(points: FloatArray, voxel_m: float) -> FloatArray:
    """One point (the mean) per occupied voxel of `voxel_m`."""
    if len(points) == 0:
        return points
    keys = np.floor(points / voxel_m).astype(np.int64)
    _, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    count = int(inverse.max()) + 1
    sums = np.stack([np.bincount(inverse, weights=points[:, i], minlength=count) for i in range(3)], axis=1)
    out: FloatArray = sums / np.bincount(inverse, minlength=count)[:, None]
    return out


def object_msg(obj: PerceivedObject, voxel_m: float = 0.01) -> PerceivedObjectMsg:
    low, high = obj.bbox
    return PerceivedObjectMsg(
        track_id=int(obj.track_id),
        label=obj.label,
        score=float(obj.score),
        centroid=_point(obj.centroid),
        bbox_min=_point(low),
        bbox_max=_point(high),
        points=[_point(p) for p in voxel_points(obj.points, voxel_m)],
        support=obj.support,
        region=obj.region,
        cameras=list(obj.cameras),
    )


def plane_msg(plane: SupportPlane) -> SupportPlaneMsg:
    return SupportPlaneMsg(
        label=plane.label,
        normal=Vector3(x=float(plane.normal[0]), y=float(plane.normal[1]), z=float(plane.normal[2])),
        offset=float(plane.offset),
        height=float(plane.height_m),
        min_corner=Point(x=float(plane.min_xy[0]), y=float(plane.min_xy[1]), z=float(plane.height_m)),
        max_corner=Point(x=float(plane.max_xy[0]), y=float(plane.max_xy[1]), z=float(plane.height_m)),
    )


def scene_msg(
    objects: list[PerceivedObject],
    planes: list[SupportPlane],
    diagnostics: list[str],
    stamp: TimeMsg,
    out_of_view: tuple[str, ...] = (),
) -> PerceivedScene:
    msg = PerceivedScene(
        objects=[object_msg(o) for o in objects],
        planes=[plane_msg(p) for p in planes],
        diagnostics=diagnostics,
        out_of_view_locations=list(out_of_view),
    )
    msg.header.stamp = stamp
    msg.header.frame_id = WORLD_FRAME
    return msg


def reference_image_from_msg(msg: ReferenceImage) -> references.ReferenceImage:
    return references.ReferenceImage(
        user_id=msg.user_id,
        entity=msg.entity,
        key=msg.key,
        path=msg.path,
        image_format=msg.image.format,
        data=bytes(msg.image.data),
    )
