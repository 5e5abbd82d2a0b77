"""Synthetic RGB-D views and a tiny configuration (a robot of three primitives, an empty
catalog) for perception tests that need neither the simulator nor the Panda's meshes: the
optional extras' virtualenvs have neither."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from carryon_common.core.clouds import CameraView
from carryon_perception.core.config import PerceptionConfig

SIZE = 96
F = 80.0
TABLE_Z = 0.42
CAMERA_Z = 1.2  # looking straight down from here
WOOD = (150, 110, 80)

Box = tuple[tuple[int, int, int, int], float, tuple[int, int, int]]


def overhead(boxes: Sequence[Box], camera: str = "top") -> CameraView:
    """A camera looking straight down at a table (z = 0.42) with boxes: each (rows r0:r1,
    cols c0:c1), its height above the table (m), its rgb colour."""
    depth = np.full((SIZE, SIZE), CAMERA_Z - TABLE_Z, dtype=np.float32)
    rgb = np.full((SIZE, SIZE, 3), WOOD, dtype=np.uint8)
    for (r0, r1, c0, c1), height, colour in boxes:
        depth[r0:r1, c0:c1] = CAMERA_Z - TABLE_Z - height
        rgb[r0:r1, c0:c1] = colour
    k = np.array([[F, 0.0, (SIZE - 1) / 2], [0.0, F, (SIZE - 1) / 2], [0.0, 0.0, 1.0]])
    pose = np.eye(4)
    pose[:3, :3] = np.diag([1.0, -1.0, -1.0])  # optical z down, x along world x, y along -world y
    pose[:3, 3] = [0.5, 0.0, CAMERA_Z]
    return CameraView(camera, 0.0, rgb, depth, None, {}, k, pose)


class NoRobot:
    def mask(self, points: np.ndarray, joints: Mapping[str, float], gripper_width_m: float | None = None) -> np.ndarray:
        return np.zeros(len(points), dtype=bool)


# A robot of primitives standing far off the table (outside the perceived box): the real
# self-filter runs, and no table point is its.
BLOCKS_URDF = """<?xml version="1.0"?>
<robot name="blocks">
  <link name="base"><collision><geometry><box size="0.2 0.1 0.05"/></geometry></collision></link>
  <link name="arm">
    <collision><origin xyz="0 0 0.2"/><geometry><cylinder radius="0.03" length="0.4"/></geometry></collision>
  </link>
  <link name="tip"><collision><geometry><sphere radius="0.05"/></geometry></collision></link>
  <joint name="turn" type="revolute">
    <parent link="base"/><child link="arm"/><origin xyz="0 0 0.025"/><axis xyz="1 0 0"/>
    <limit lower="-3" upper="3" effort="1" velocity="1"/>
  </joint>
  <joint name="spin" type="continuous">
    <parent link="arm"/><child link="tip"/><origin xyz="0 0 0.5"/><axis xyz="0 0 1"/>
  </joint>
</robot>
"""
BLOCKS_JOINTS = {"turn": 0.0, "spin": 0.0}


def tiny_config_dir(root: Path) -> Path:
    """A config folder under `root` with robot/blocks.yaml (+ its URDF), an empty catalog
    (perception/catalog.yaml) and two table regions (planner/locations.yaml)."""
    (root / "robot").mkdir(parents=True, exist_ok=True)
    (root / "perception").mkdir(exist_ok=True)
    (root / "planner").mkdir(exist_ok=True)
    (root / "robot" / "blocks.urdf").write_text(BLOCKS_URDF)
    (root / "robot" / "blocks.yaml").write_text(
        f"urdf_file: {root / 'robot' / 'blocks.urdf'}\njoint_names: [turn, spin]\ntool_frame: tip\n"
        "tcp_xyz: [0, 0, 0]\ntcp_rpy: [0, 0, 0]\nbase_xyz: [5.0, 5.0, 0.0]\nbase_rpy: [0, 0, 0]\n"
    )
    (root / "perception" / "catalog.yaml").write_text("descriptor: hs12x3+v4\nobjects: {}\ntypes: {}\n")
    (root / "planner" / "locations.yaml").write_text(
        "locations:\n"
        "  left: {center: [0.5, 0.2], size: [0.6, 0.4], description: left half}\n"
        "  right: {center: [0.5, -0.2], size: [0.6, 0.4], description: right half}\n"
    )
    return root


def tiny_config(**overrides: Any) -> PerceptionConfig:
    """perception_node's config over `tiny_config_dir` (pass that folder to build_perception)."""
    files = {
        "robot_file": "robot/blocks.yaml",
        "catalog_file": "perception/catalog.yaml",
        "locations_file": "planner/locations.yaml",
        "cameras": ["top"],
    }
    return PerceptionConfig(**{**files, **overrides})
