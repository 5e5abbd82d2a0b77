"""Judge observations of the simulated world in one process (benchmarks and tests).

Renders the cameras with carryon_sim's CameraRig (the images sim_node publishes) and
attaches the robot state and the simulator ground truth, so the same Observation feeds
the geometric judge (masks + depth + gripper), the VLM (colour) and the SIMULATOR ORACLE
(`harness.oracle`, truth).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from carryon_common.core.clouds import CameraView
from carryon_judge.core.types import Observation
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.contacts import grasped_objects
from carryon_sim.core.predicates import covered_by, inside_of
from carryon_sim.core.scene import TABLE_TOP_Z, TABLE_X, TABLE_Y
from carryon_sim.core.world import SCENE_CAMERA, WRIST_CAMERA, World

# Camera names on the graph -> MuJoCo camera names (as sim_node publishes them).
SIM_CAMERAS = {"scene": SCENE_CAMERA, "wrist": WRIST_CAMERA}


@dataclass(frozen=True)
class TruthObject:
    """Simulator ground truth of one object (SIMULATOR ORACLE: the harness's oracle judge and
    benchmarks read it; nothing a robot could use). `offstage`: off the table, out of every
    camera's view."""

    name: str
    position: tuple[float, float, float]
    grasped: bool = False
    inside: str = ""
    covered_by: str = ""
    offstage: bool = False


@dataclass(frozen=True)
class SimObservation(Observation):
    """A judge Observation of the simulated world with the simulator's ground truth attached
    (SIMULATOR ORACLE: only the harness's oracle judge and benchmarks read `truth`)."""

    truth: Mapping[str, TruthObject] | None = None


def truth_of(world: World) -> dict[str, TruthObject]:
    """Ground truth of every scene object now."""
    grasped = grasped_objects(world.model, world.data, world.object_of_body)
    out = {}
    for obj in world.scene.spec.objects:
        x, y, z = (float(v) for v in world.object_position(obj.name))
        on_table = TABLE_X[0] <= x <= TABLE_X[1] and TABLE_Y[0] <= y <= TABLE_Y[1] and z > TABLE_TOP_Z - 0.05
        out[obj.name] = TruthObject(
            name=obj.name,
            position=(x, y, z),
            grasped=obj.name in grasped,
            inside=inside_of(world, obj.name),
            covered_by=covered_by(world, obj.name),
            offstage=not on_table,
        )
    return out


def observe_world(
    world: World,
    rig: CameraRig | None,
    observation_id: int,
    *,
    cameras: tuple[str, ...] = tuple(SIM_CAMERAS),
    rgb: bool = True,
) -> SimObservation:
    """Render `cameras` and collect robot state + ground truth into one Observation
    (`rig` may be None when no camera is asked for: ground truth and robot state only)."""
    if cameras and rig is None:
        raise ValueError("rendering cameras needs a CameraRig")
    views = []
    for camera in cameras:
        assert rig is not None
        frame = rig.render(world.data, SIM_CAMERAS[camera], rgb=rgb)
        views.append(
            CameraView(
                camera=camera,
                stamp_s=frame.stamp_s,
                rgb=frame.rgb if rgb else None,
                depth=frame.depth,
                segmentation=frame.segmentation,
                labels=dict(frame.labels),
                intrinsics=frame.K,
                world_from_camera=frame.world_from_camera,
            )
        )
    position, _ = world.ee_pose()
    return SimObservation(
        observation_id=observation_id,
        stamp_s=world.time,
        views=tuple(views),
        ee_position=position,
        gripper_width_m=world.gripper_width(),
        truth=truth_of(world),
    )
