"""Judge observations of the simulated world in one process (benchmarks and tests).

Renders the cameras with carryon_sim's CameraRig (the images sim_node publishes) and
attaches the robot state and the simulator ground truth, so the same Observation feeds
the geometric judge (masks + depth + gripper), the VLM (colour) and the SIMULATOR ORACLE
(`harness.oracle`, truth). Whose masks the views carry: the simulator's own instance
segmentation (a SIMULATOR ORACLE, the default for callers that ask for none), or
carryon_perception's on the rendered colour + depth (`PerceivedMasks`, what perception_node
publishes in the graph).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from carryon_common.core.clouds import CameraView, ObservationUnusable
from carryon_judge.core.types import Observation
from carryon_perception.core.tabletop import TabletopPerception
from carryon_perception.core.tracker import Tracker
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


@dataclass
class PerceivedMasks:
    """carryon_perception's segmentation in place of the simulator's: each observation's
    rendered colour + depth run through one `TabletopPerception` with the arm's joint
    positions and gripper width, as perception_node does. A camera perception could not use
    keeps no masks (its consumers then do without it); `diagnostics` holds the last step's."""

    perception: TabletopPerception
    diagnostics: list[str] = field(default_factory=list)

    def fresh(self) -> PerceivedMasks:
        """The same pipeline with its tracks and planes forgotten (a new episode)."""
        p = self.perception
        tracks = Tracker(p.tracker.match_distance_m)
        return PerceivedMasks(TabletopPerception(p.labeller, p.self_filter, p.locations, p.params, tracks))

    def apply(self, world: World, views: list[CameraView]) -> list[CameraView]:
        try:
            result = self.perception.perceive(views, world.joint_states(), world.gripper_width(), world.time)
        except ObservationUnusable as exc:
            self.diagnostics = [str(exc)]
            return [replace(v, segmentation=None, labels={}) for v in views]
        self.diagnostics = list(result.diagnostics)
        out = []
        for view in views:
            seg = result.segmentations.get(view.camera)
            if seg is None:
                out.append(replace(view, segmentation=None, labels={}))
            else:
                out.append(replace(view, segmentation=seg.instances, labels=dict(seg.labels)))
        return out


def observe_world(
    world: World,
    rig: CameraRig | None,
    observation_id: int,
    *,
    cameras: tuple[str, ...] = tuple(SIM_CAMERAS),
    rgb: bool = True,
    masks: PerceivedMasks | None = None,
) -> SimObservation:
    """Render `cameras` and collect robot state + ground truth into one Observation
    (`rig` may be None when no camera is asked for: ground truth and robot state only).
    The views carry `masks`' segmentation when given (colour is then rendered whatever
    `rgb` says: perception needs it), else the simulator's own (SIMULATOR ORACLE)."""
    if cameras and rig is None:
        raise ValueError("rendering cameras needs a CameraRig")
    rgb = rgb or masks is not None
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
    if masks is not None and views:
        views = masks.apply(world, views)
    position, _ = world.ee_pose()
    return SimObservation(
        observation_id=observation_id,
        stamp_s=world.time,
        views=tuple(views),
        ee_position=position,
        gripper_width_m=world.gripper_width(),
        truth=truth_of(world),
    )
