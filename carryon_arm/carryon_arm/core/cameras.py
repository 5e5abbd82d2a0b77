"""Camera bridging from YAML: your camera drivers' topics and frames → CarryOn's
`camera/<name>/{color,depth,camera_info,pose}` (and optionally segmentation + labels).

Depth becomes 32FC1 metres (16UC1 depth, e.g. RealSense millimetres, is scaled by
`depth_scale`; zero = no reading becomes NaN). The pose of each camera's optical frame in
`world` comes from the file: fixed (`mount: world`) or hand-eye on the tool centre point
(`mount: tool`, composed with the measured tool pose).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field
from scipy.spatial.transform import Rotation

from carryon_common.core.config import load_yaml_model

FloatArray = npt.NDArray[np.float64]


class CameraSource(BaseModel):
    """One camera: where its driver publishes and where it sits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    color: str = Field(description="sensor_msgs/Image topic, rgb8 or bgr8")
    depth: str = Field(description="sensor_msgs/Image depth topic aligned to color, 32FC1 metres or 16UC1")
    camera_info: str = Field(description="sensor_msgs/CameraInfo topic of the color (= depth) image")
    segmentation: str = Field("", description="optional instance masks (32SC1 / 16UC1) topic")
    labels: str = Field("", description="optional carryon_interfaces/SegmentationLabels topic")
    depth_scale: float = Field(0.001, gt=0.0, description="metres per 16UC1 depth unit")
    frame_id: str = Field("", description="frame written into the bridged headers ('' = keep the driver's)")
    mount: Literal["world", "tool"] = Field(description="the pose below is in 'world' or on the tool centre point")
    xyz: tuple[float, float, float] = Field(description="optical frame position, metres")
    rpy: tuple[float, float, float] = Field(
        description="optical frame orientation, roll-pitch-yaw radians (z forward, y down)"
    )

    def mount_matrix(self) -> FloatArray:
        pose = np.eye(4)
        pose[:3, :3] = Rotation.from_euler("xyz", list(self.rpy)).as_matrix()
        pose[:3, 3] = self.xyz
        return pose

    def optical_pose(self, tool_position: FloatArray | None, tool_rotation: FloatArray | None) -> FloatArray | None:
        """4x4 pose of the optical frame in `world` (None: a tool camera before any joint state)."""
        if self.mount == "world":
            return self.mount_matrix()
        if tool_position is None or tool_rotation is None:
            return None
        tool = np.eye(4)
        tool[:3, :3], tool[:3, 3] = tool_rotation, tool_position
        return tool @ self.mount_matrix()


class CameraMap(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cameras: dict[str, CameraSource]


def load_camera_map(path: Path) -> CameraMap:
    """The cameras file, validated; errors name the file and the field."""
    return load_yaml_model(CameraMap, path)


def depth_in_metres(depth: npt.NDArray[np.generic], depth_scale: float) -> npt.NDArray[np.float32]:
    """A depth image as float32 metres; integer zeros (no reading) become NaN."""
    if np.issubdtype(depth.dtype, np.floating):
        return depth.astype(np.float32, copy=False)
    metres = depth.astype(np.float32) * np.float32(depth_scale)
    metres[depth == 0] = np.nan
    return metres
