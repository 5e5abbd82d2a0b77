"""Headless RGB-D + instance-segmentation cameras for the simulated world.

Images follow ROS conventions: color rgb8 (H, W, 3) uint8; depth 32FC1 (H, W) float32 in
metres along the optical axis (0 where nothing is hit); segmentation (H, W) int32
instance ids with a label table id -> object name (0 = background). Camera poses are
given for the ROS *optical* frame (z forward, x right, y down) in `world`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

os.environ.setdefault("MUJOCO_GL", "egl")  # headless: Mesa's software EGL, no display or GPU

import mujoco  # after MUJOCO_GL is set

# MuJoCo cameras look along -z with y up; the ROS optical frame looks along +z with y down.
_MUJOCO_TO_OPTICAL = np.diag([1.0, -1.0, -1.0])


@dataclass(frozen=True)
class CameraFrame:
    """One rendered view. K: 3x3 intrinsics (pixels); world_from_camera: 4x4, optical frame."""

    camera: str
    rgb: npt.NDArray[np.uint8]
    depth: npt.NDArray[np.float32]
    segmentation: npt.NDArray[np.int32]
    labels: dict[int, str]
    K: npt.NDArray[np.float64]
    world_from_camera: npt.NDArray[np.float64]
    stamp_s: float


class CameraRig:
    """Renders named cameras of a model at one resolution. Call `close()` when done.

    By default the robot is drawn with its collision meshes and without shadows or
    anti-aliasing: ~20x cheaper on a CPU than its high-poly visual meshes (measured by
    `carryon bench sim`), and what a depth camera resolves anyway. `detailed=True` draws
    the visual meshes with anti-aliasing (for pictures, not for control loops); it
    changes the model's render quality settings, shared by every renderer of the model.
    """

    def __init__(
        self, model: mujoco.MjModel, object_of_body: dict[int, str], width: int, height: int, *, detailed: bool = False
    ) -> None:
        self.model = model
        self.width, self.height = width, height
        model.vis.quality.shadowsize = 4096 if detailed else 0
        model.vis.quality.offsamples = 4 if detailed else 0
        self._renderer = mujoco.Renderer(model, height=height, width=width)
        self._option = mujoco.MjvOption()
        self._option.sitegroup[:] = 0  # hide helper sites (grip markers) from every image
        self._option.geomgroup[1] = int(detailed)  # group 1: the robot's visual meshes
        # Instance ids: one per object name (robot links share "robot"), stable for the model.
        names = sorted(set(object_of_body.values()))
        self.labels = {i + 1: name for i, name in enumerate(names)}
        instance_of_name = {name: i for i, name in self.labels.items()}
        self._instance_of_geom = np.zeros(model.ngeom + 1, dtype=np.int32)  # index ngeom: "no geom"
        for geom in range(model.ngeom):
            name = object_of_body.get(int(model.geom_bodyid[geom]))
            if name is not None:
                self._instance_of_geom[geom] = instance_of_name[name]

    def close(self) -> None:
        self._renderer.close()

    def intrinsics(self, camera: str) -> npt.NDArray[np.float64]:
        fovy = math.radians(float(self.model.cam_fovy[self.model.camera(camera).id]))
        f = 0.5 * self.height / math.tan(fovy / 2)
        return np.array([[f, 0.0, (self.width - 1) / 2], [0.0, f, (self.height - 1) / 2], [0.0, 0.0, 1.0]])

    def pose(self, data: mujoco.MjData, camera: str) -> npt.NDArray[np.float64]:
        cam = self.model.camera(camera).id
        out = np.eye(4)
        out[:3, :3] = data.cam_xmat[cam].reshape(3, 3) @ _MUJOCO_TO_OPTICAL
        out[:3, 3] = data.cam_xpos[cam]
        return out

    def render(
        self, data: mujoco.MjData, camera: str, *, rgb: bool = True, segmentation: bool = True, depth: bool = True
    ) -> CameraFrame:
        """Color, depth and segmentation of `camera` for the state in `data`; each optional
        (all 0 without)."""
        r = self._renderer
        color = np.zeros((self.height, self.width, 3), dtype=np.uint8)
        if rgb:
            r.update_scene(data, camera, scene_option=self._option)
            color = r.render().copy()
        distance = np.zeros((self.height, self.width), dtype=np.float32)
        if depth:
            r.enable_depth_rendering()
            r.update_scene(data, camera, scene_option=self._option)
            distance = r.render().astype(np.float32)
            r.disable_depth_rendering()
            distance[distance >= self.model.stat.extent * self.model.vis.map.zfar * 0.99] = 0.0  # nothing hit
        instances = np.zeros((self.height, self.width), dtype=np.int32)
        if segmentation:
            r.enable_segmentation_rendering()
            r.update_scene(data, camera, scene_option=self._option)
            seg = r.render()
            r.disable_segmentation_rendering()
            geom_ids = np.where(seg[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM), seg[..., 0], self.model.ngeom)
            instances = self._instance_of_geom[geom_ids]
        return CameraFrame(
            camera,
            color,
            distance,
            instances,
            dict(self.labels),
            self.intrinsics(camera),
            self.pose(data, camera),
            float(data.time),
        )
