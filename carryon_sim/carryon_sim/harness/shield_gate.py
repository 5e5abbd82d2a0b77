"""The shield in-process on the MuJoCo world (no ROS): for benchmarks and end-to-end tests.

`SimShieldGate` is the `gate(chunk, world)` hook of `carryon_sim.harness.episodes.run_episode`:
at every inference it renders the scene and wrist cameras, grounds them with the shield's
mask grounder, reads the measured tool pose, velocity and gripper width, and lets the same
gate + filter as shield_node decide (both built by carryon_shield.core.build.build_shield).
Where the masks come from is the `masks` argument:

- `perception` (default, what the graph does): colour + depth are rendered and run through
  one `TabletopPerception` (carryon_perception, built by `build_tabletop` for the world's
  scene and objects, perception_node's config file) with the arm's joint positions and the
  gripper width, as perception_node does; the shield (grounder `masks`) sees perception's
  instance ids and labels (`robot`, `table`, catalog names, `unknown_<n>`) with the rendered
  depth. A camera perception leaves out keeps its last frame (it goes stale; the shield
  fails closed). Tracks restart every episode (`reset`).
- `sim_truth` (ablation, SIMULATOR ORACLE): depth + the simulator's own labelled instance
  segmentation (grounder `sim_truth`), what sim_node publishes on sim/camera/<name>/....

Only transport differs from the graph: images come straight from the renderer instead of
over DDS. The task's exemptions come from the instruction's stand-in script, as the
planner's SetTask would.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np

from carryon_common.core.chunk import Chunk
from carryon_common.core.clouds import CameraView, ObservationUnusable
from carryon_common.core.config import config_path, load_node_config
from carryon_common.core.locations import Location
from carryon_perception.core.build import build_perception, build_tabletop, scene_locations_file
from carryon_perception.core.config import PerceptionConfig
from carryon_perception.core.tabletop import TabletopPerception
from carryon_perception.core.tracker import Tracker
from carryon_shield.core.build import build_shield
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.gate import Decision, ShieldDecision
from carryon_shield.core.perception import CommandTracker
from carryon_shield.core.response import ResponseModel, commanded_poses
from carryon_shield.core.types import RgbdFrame, RobotState, TaskSpec
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.scene import Scene
from carryon_sim.core.world import SCENE_CAMERA, WRIST_CAMERA, World
from carryon_sim.harness.episodes import Task, contact_task
from carryon_sim.harness.stand_in.scripts import Script

CAMERAS = {"scene": SCENE_CAMERA, "wrist": WRIST_CAMERA}
# Rendered size for in-process runs: sim_node's default camera size, so decisions match
# the graph's; two 256x256 depth + segmentation renders cost ~20 ms on one core (colour too
# with masks="perception", then perception itself ~100+ ms: GateStats.perception_s).
RENDER_SIZE = (256, 256)
# Where the shield's masks come from (`masks`), and the shield grounder that reads them.
MASK_SOURCES = {"perception": "masks", "sim_truth": "sim_truth"}


def task_spec(world: World, script: Script, subtask_id: str) -> TaskSpec:
    """The SetTask an executive would send for a scripted instruction (`contact_task`, the
    same task the episode's contact monitor judges by)."""
    task = contact_task(world, script, subtask_id)
    return TaskSpec(task.subtask_id, task.target, task.source, task.destination, task.permitted)


def scene_perception(config_dir: Path, scene: Scene) -> TabletopPerception:
    """carryon_perception for `scene` (`build_tabletop`: perception_node's config file, the
    scene's planner locations file, candidates = the scene's objects). A scene the planner
    has no locations file for (a test's own) gets its regions from the scene file."""
    objects = [o.name for o in scene.spec.objects]
    if (config_dir / scene_locations_file(scene.name)).is_file():
        return build_tabletop(config_dir, scene.name, objects)
    node_file = config_dir / "nodes" / "perception_node.yaml"
    config = load_node_config(PerceptionConfig, [node_file] if node_file.is_file() else [], "perception_node", "/", {})
    built = build_perception(config.model_copy(update={"objects": objects}), config_dir)
    regions = {
        name: Location(center=spec.center, size=spec.size, description=spec.description)
        for name, spec in scene.spec.locations.items()
    }
    return TabletopPerception(built.labeller, built.self_filter, regions, built.params, built.tracker)


def tcp_velocity(world: World) -> np.ndarray:
    """Linear velocity (3,) of the tool centre point, m/s, world frame."""
    out = np.zeros(6)
    mujoco.mj_objectVelocity(world.model, world.data, mujoco.mjtObj.mjOBJ_SITE, world.robot.ee_site, out, 0)
    return out[3:].copy()


@dataclass
class GateStats:
    decisions: list[ShieldDecision] = field(default_factory=list)
    latency_s: list[float] = field(default_factory=list)  # filter only (grounding excluded)
    grounding_s: list[float] = field(default_factory=list)
    perception_s: list[float] = field(default_factory=list)  # masks="perception": perceive() per inference

    def count(self, decision: Decision) -> int:
        return sum(d.decision == decision for d in self.decisions)


class SimShieldGate:
    """`gate(chunk, world) -> Chunk | None` for run_episode. Call `close()` when done.

    `masks`: `perception` (default) feeds the shield carryon_perception's segmentation of the
    rendered colour + depth (config files under `perception_config_dir`, default the config
    folder: $CARRYON_CONFIG_DIR or ./config); `sim_truth` feeds it the simulator's own masks,
    a SIMULATOR ORACLE for ablations. The shield's grounder is set to match (`masks` /
    `sim_truth`), whatever `config.grounder` says."""

    def __init__(
        self,
        world: World,
        config: ShieldConfig,
        tasks: Sequence[Task],
        response: ResponseModel,
        *,
        render_size: tuple[int, int] = RENDER_SIZE,
        masks: str = "perception",
        perception_config_dir: Path | None = None,
    ) -> None:
        if masks not in MASK_SOURCES:
            raise ValueError(f"masks={masks!r}: expected one of {', '.join(repr(m) for m in MASK_SOURCES)}")
        self.world = world
        self.masks = masks
        self.config = config.model_copy(update={"grounder": MASK_SOURCES[masks]})
        self.tasks = list(tasks)
        self.scene_perception: TabletopPerception | None = None
        if masks == "perception":
            config_dir = (perception_config_dir or config_path("")).resolve()
            self.scene_perception = scene_perception(config_dir, world.scene)
        self.rig = CameraRig(world.model, world.object_of_body, *render_size)
        pipeline = build_shield(self.config, response)
        if pipeline.shield.arm is not None:
            pipeline.shield.arm.warm_up()  # compiled before the first chunk, as shield_node does
        self.perception, self.shield, self.gate = pipeline.perception, pipeline.shield, pipeline.gate
        self.tracker = CommandTracker()
        self.stats = GateStats()
        self.diagnostics: list[str] = []  # masks="perception": the last step's (cameras left out, ...)
        self._subtask: str | None = None

    def close(self) -> None:
        self.rig.close()

    def reset(self) -> None:
        """A new episode: forget the task, the latch and what was commanded; perception's
        tracks and last planes restart (its catalog and self-filter are kept)."""
        self._subtask = None
        self.perception.latch.update(0.0, 0.0)
        self.tracker = CommandTracker()
        p = self.scene_perception
        if p is not None:
            tracks = Tracker(p.tracker.match_distance_m)
            self.scene_perception = TabletopPerception(p.labeller, p.self_filter, p.locations, p.params, tracks)

    def _frames(self, now_s: float) -> list[RgbdFrame]:
        """This instant's frames for the shield, masks from the configured source."""
        world = self.world
        rendered = {
            camera: self.rig.render(world.data, mujoco_name, rgb=self.masks == "perception")
            for camera, mujoco_name in CAMERAS.items()
        }
        if self.scene_perception is None:  # sim_truth: the SIMULATOR ORACLE's masks
            return [
                RgbdFrame(
                    c,
                    f.depth,
                    f.K,
                    f.world_from_camera,
                    now_s,
                    segmentation=f.segmentation,
                    labels=f.labels,
                    mask_stamp_s=now_s,
                )
                for c, f in rendered.items()
            ]
        views = [CameraView(c, now_s, f.rgb, f.depth, None, {}, f.K, f.world_from_camera) for c, f in rendered.items()]
        joints = world.joint_states()  # the fingers too: each is posed where it is
        began = time.perf_counter()
        try:
            result = self.scene_perception.perceive(views, joints, world.gripper_width(), now_s)
        except ObservationUnusable as exc:
            self.diagnostics = [str(exc)]
            return []  # no camera usable: nothing is updated, the shield's frames go stale
        finally:
            self.stats.perception_s.append(time.perf_counter() - began)
        self.diagnostics = list(result.diagnostics)
        return [
            RgbdFrame(
                c,
                f.depth,
                f.K,
                f.world_from_camera,
                now_s,
                segmentation=seg.instances,
                labels=dict(seg.labels),
                mask_stamp_s=now_s,
            )
            for c, f in rendered.items()
            if (seg := result.segmentations.get(c)) is not None
        ]

    def observe(self, now_s: float) -> None:
        world = self.world
        for frame in self._frames(now_s):
            self.perception.update_frame(frame)
        position, rotation = world.ee_pose()
        target_position, target_rotation = self.tracker.target(now_s)
        self.perception.update_state(
            RobotState(
                position,
                rotation,
                tcp_velocity(world),
                world.gripper_width(),
                self.tracker.gripper_command(now_s),
                now_s,
                target_position,
                target_rotation,
                joints=world.arm_q(),
            )
        )
        began = time.perf_counter()
        self.perception.ground(now_s)
        self.stats.grounding_s.append(time.perf_counter() - began)

    def __call__(self, chunk: Chunk, world: World) -> Chunk | None:
        now = world.time
        if chunk.subtask_id != self._subtask:
            self._subtask = chunk.subtask_id
            script = self.tasks[int(chunk.subtask_id)].script
            self.perception.set_task(task_spec(world, script, chunk.subtask_id))
        self.observe(now)
        began = time.perf_counter()
        decision = self.gate.decide(chunk, now)
        self.stats.latency_s.append(time.perf_counter() - began)
        if decision.error is not None:
            raise decision.error
        self.stats.decisions.append(decision)
        released = decision.released
        if released is not None:
            state = self.perception.state
            assert state is not None
            base_p, base_r = self.tracker.target(now)
            positions, rotations = commanded_poses(
                released, state.position if base_p is None else base_p, state.rotation if base_r is None else base_r
            )
            self.tracker.record(released.gripper, positions, rotations, dt=released.dt, now_s=now)
        return released
