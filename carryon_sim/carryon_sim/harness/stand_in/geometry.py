"""What the stand-in knows of the world's geometry: object footprints, heights and grasp
heights (read from the simulator's scene files), and the downward tool's orientation.

Frames: world (z up). Units: metres, radians.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from carryon_policy.core.policy import FloatArray, MissingObservation
from carryon_sim.core.scene import Scene, load_scene, scene_path

# Tool orientation with the gripper pointing down and the fingers closing along world y
# (yaw 0); a yaw turns it about world z.
DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
FINGER_TIP_BELOW_TCP_M = 0.011  # fingertips reach this far below the tool centre point
MIN_TIP_CLEARANCE_M = 0.002  # keep fingertips this far above the table when grasping
OPEN_WIDTH_M = 0.08
UP = np.array([0.0, 0.0, 1.0])


@dataclass(frozen=True)
class ObjectGeometry:
    """What the stand-in knows of an object: its type, footprint radius and height (m),
    and the height above its base at which to grasp it (None = not graspable)."""

    name: str
    type: str
    radius_m: float
    height_m: float
    grasp_height_m: float | None
    yaw_symmetry: float  # grasp yaw repeats every this many radians (0 = any yaw)


# Grasp height above the base (metres, scale 1) and yaw symmetry per object type.
GRASPS: dict[str, tuple[float, float]] = {
    "carrot": (0.014, math.pi),
    "meat": (0.015, math.pi),
    "bread": (0.02, math.pi),
    "cube": (0.02, math.pi / 2),
    "can": (0.065, 0.0),
    "cover": (0.083, math.pi),  # by its knob, across its narrow side
}


def object_geometry(scene: Scene, name: str) -> ObjectGeometry:
    """Footprint, height and grasp height of one object of `scene` (scaled)."""
    spec = scene.object(name)
    grasp = GRASPS.get(spec.type)
    return ObjectGeometry(
        name=name,
        type=spec.type,
        radius_m=spec.kind.footprint_m * spec.scale,
        height_m=spec.kind.height_m * spec.scale,
        grasp_height_m=None if grasp is None else grasp[0] * spec.scale,
        yaw_symmetry=0.0 if grasp is None else grasp[1],
    )


def scene_geometry(scenes_dir: Path) -> Callable[[str, str], ObjectGeometry]:
    """`geometry(scene_name, object_name)` backed by the scene files in `scenes_dir`."""

    @cache
    def scene(name: str) -> Scene:
        return load_scene(scene_path(scenes_dir, name))

    def geometry(scene_name: str, name: str) -> ObjectGeometry:
        if not scene_name:
            raise MissingObservation("no simulator scene name yet (sim/truth not received)")
        try:
            return object_geometry(scene(scene_name), name)
        except KeyError as exc:  # UnknownNameError lists the scene's objects
            raise MissingObservation(str(exc)) from None

    return geometry


def tool_yaw(rotation: FloatArray) -> float:
    """Yaw of a downward-pointing tool from its rotation matrix (3, 3)."""
    finger_axis = rotation[:, 0]
    return float(math.atan2(-finger_axis[0], finger_axis[1]))


def yaw_rotvec(yaw: float) -> FloatArray:
    """Rotation vector (3,) of the downward tool turned by `yaw` about world z."""
    rotvec: FloatArray = Rotation.from_matrix(Rotation.from_euler("z", yaw).as_matrix() @ DOWN).as_rotvec()
    return rotvec


def closest_yaw(target: float, symmetry: float, current: float) -> float:
    """The yaw equivalent to `target` under `symmetry` (radians; 0 = any yaw: `current`)
    nearest to `current`."""
    if symmetry <= 0.0:
        return current
    k = round((current - target) / symmetry)
    return target + k * symmetry


def wrap(angle: float) -> float:
    """`angle` wrapped to [-pi, pi)."""
    return (angle + math.pi) % (2 * math.pi) - math.pi
