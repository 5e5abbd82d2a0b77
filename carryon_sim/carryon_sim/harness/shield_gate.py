"""The shield in-process on the MuJoCo world (no ROS): for benchmarks and end-to-end tests.

`SimShieldGate` is the `gate(chunk, world)` hook of `carryon_sim.harness.episodes.run_episode`:
at every inference it renders the scene and wrist cameras (depth + segmentation, the same
streams sim_node publishes), grounds them with `sim_masks`, reads the measured tool pose,
velocity and gripper width, and lets the same gate + filter as shield_node decide (both
built by carryon_shield.core.build.build_shield). Only perception differs from the graph:
images come straight from the renderer instead of over DDS. Simulator ground truth is
never shown to the shield; the task's exemptions come from the instruction's stand-in
script, as the planner's SetTask would.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import mujoco
import numpy as np

from carryon_common.core.chunk import Chunk
from carryon_shield.core.build import build_shield
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.gate import Decision, ShieldDecision
from carryon_shield.core.perception import CommandTracker
from carryon_shield.core.response import ResponseModel, commanded_poses
from carryon_shield.core.types import RgbdFrame, RobotState, TaskSpec
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.predicates import inside_of
from carryon_sim.core.world import SCENE_CAMERA, WRIST_CAMERA, World
from carryon_sim.harness.episodes import Task, permitted_contacts
from carryon_sim.harness.stand_in.scripts import Script

CAMERAS = {"scene": SCENE_CAMERA, "wrist": WRIST_CAMERA}
# Rendered size for in-process runs: sim_node's default camera size, so decisions match
# the graph's; two 256x256 depth + segmentation renders cost ~20 ms on one core.
RENDER_SIZE = (256, 256)


def task_spec(world: World, script: Script, subtask_id: str) -> TaskSpec:
    """The SetTask an executive would send for a scripted instruction: its object, the
    support it stands on (the table when none), its destination (the table for lift-aside
    and push, which set objects down on / slide them along it), and the other contacts the
    task implies (what a cover hides)."""
    source = inside_of(world, script.object) or "table"
    destination = script.destination or "table"
    others = permitted_contacts(world, script) - {"table", script.object, source, destination}
    return TaskSpec(subtask_id, script.object, source, destination, tuple(sorted(others)))


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

    def count(self, decision: Decision) -> int:
        return sum(d.decision == decision for d in self.decisions)


class SimShieldGate:
    """`gate(chunk, world) -> Chunk | None` for run_episode. Call `close()` when done."""

    def __init__(
        self,
        world: World,
        config: ShieldConfig,
        tasks: Sequence[Task],
        response: ResponseModel,
        *,
        render_size: tuple[int, int] = RENDER_SIZE,
    ) -> None:
        self.world = world
        self.config = config
        self.tasks = list(tasks)
        self.rig = CameraRig(world.model, world.object_of_body, *render_size)
        pipeline = build_shield(config, response)
        self.perception, self.shield, self.gate = pipeline.perception, pipeline.shield, pipeline.gate
        self.tracker = CommandTracker()
        self.stats = GateStats()
        self._subtask: str | None = None

    def close(self) -> None:
        self.rig.close()

    def reset(self) -> None:
        """A new episode: forget the task, the latch and what was commanded."""
        self._subtask = None
        self.perception.latch.update(0.0, 0.0)
        self.tracker = CommandTracker()

    def observe(self, now_s: float) -> None:
        world = self.world
        for camera, mujoco_name in CAMERAS.items():
            f = self.rig.render(world.data, mujoco_name, rgb=False)
            self.perception.update_frame(
                RgbdFrame(
                    camera,
                    f.depth,
                    f.K,
                    f.world_from_camera,
                    now_s,
                    segmentation=f.segmentation,
                    labels=f.labels,
                    mask_stamp_s=now_s,
                )
            )
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
