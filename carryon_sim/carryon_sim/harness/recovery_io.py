"""`RecoveryIO` on the in-process simulator: perception from rendered masks + depth (the
judge's `object_clouds`, no ground truth) — carryon_perception's masks when `masks` is given
(`PerceivedMasks`, what the graph does), else the simulator's own (a SIMULATOR ORACLE
ablation) — motion as ABSOLUTE recovery chunks that pass the
gate (the shield) before the same Driver sim_node uses executes them through IK."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from carryon_common.core.chunk import Chunk, ChunkSource
from carryon_common.core.clouds import FloatArray, object_clouds
from carryon_recovery.core.base_skill import Seen, run_base_skill, seen_from_clouds
from carryon_recovery.core.library import SkillVersion
from carryon_recovery.core.motion import MotionBackend, recovery_chunk, recovery_turn_rad
from carryon_recovery.core.reflection import Attempt
from carryon_recovery.core.types import Outcome
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.driver import Driver
from carryon_sim.core.world import World
from carryon_sim.harness.observation import PerceivedMasks, observe_world

Gate = Callable[[Chunk, World], Chunk | None]


class SimRecoveryIO:
    """`horizon`: steps per chunk; `speed_m_s`: tool speed; `settle_steps`: gripper wait."""

    def __init__(
        self,
        world: World,
        driver: Driver,
        rig: CameraRig,
        motion: MotionBackend,
        *,
        gate: Gate | None = None,
        masks: PerceivedMasks | None = None,
        subtask_id: str = "recovery",
        dt: float = 0.05,
        speed_m_s: float = 0.12,
        horizon: int = 8,
        settle_steps: int = 12,
        tolerance_m: float = 0.015,
    ) -> None:
        self.world, self.driver, self.rig, self.gate, self.motion = world, driver, rig, gate, motion
        self.masks = masks
        self.subtask_id, self.dt, self.speed_m_s, self.horizon = subtask_id, dt, speed_m_s, horizon
        self.settle_steps, self.tolerance_m = settle_steps, tolerance_m
        self._ids = itertools.count(10_000_000)
        self.steps = 0
        self.chunks_sent = 0
        self.chunks_blocked = 0
        self.gripper_command = 0.0

    def perceive(self, target: str, destination: str) -> Seen | None:
        observation = observe_world(self.world, self.rig, next(self._ids), rgb=False, masks=self.masks)
        clouds = object_clouds(observation.views, stride=2)
        return seen_from_clouds(clouds, target, destination)

    def tool_position(self) -> FloatArray:
        position, _ = self.world.ee_pose()
        out: FloatArray = np.asarray(position, dtype=np.float64)
        return out

    def _execute(self, positions: FloatArray, rotation: FloatArray, gripper: float) -> bool:
        """One chunk through the gate; False when the gate released none of it."""
        chunk = recovery_chunk(
            next(self._ids), self.subtask_id, positions, rotation, gripper, dt=self.dt, stamp_s=self.world.time
        )
        self.chunks_sent += 1
        released = chunk if self.gate is None else self.gate(chunk, self.world)
        if released is None or released.source == ChunkSource.RETREAT or len(released) == 0:
            self.chunks_blocked += 1
            if released is not None and len(released):  # the shield's retreat: execute it, then report
                self._run(released)
            return False
        self._run(released)
        return len(released) == len(chunk)

    def _run(self, chunk: Chunk) -> None:
        self.driver.submit(chunk, self.world.time)
        for _ in range(len(chunk)):
            self.driver.tick(self.world.time)
            self.world.step(self.dt)
            self.steps += 1

    def move(self, positions: FloatArray, rotation: FloatArray, gripper: float) -> tuple[bool, str]:
        self.gripper_command = gripper
        plan = self.motion.plan(
            self.world.arm_q(),
            self.tool_position(),
            positions,
            rotation,
            self.speed_m_s * self.dt,
            turn_rad=recovery_turn_rad(self.dt),
        )
        if not plan.ok:
            return False, plan.reason
        rotation = plan.rotation if plan.rotation is not None else rotation
        samples = plan.positions
        turning = plan.rotations if plan.rotations is not None else np.tile(rotation, (len(samples), 1, 1))
        for first in range(0, len(samples), self.horizon):
            if not self._execute(samples[first : first + self.horizon], turning[first : first + self.horizon], gripper):
                return False, "the shield did not release the whole motion"
        for _ in range(self.settle_steps):  # let the arm catch up with the last target
            self.driver.tick(self.world.time)
            self.world.step(self.dt)
            self.steps += 1
        error = float(np.linalg.norm(self.tool_position() - positions[-1]))
        if error > self.tolerance_m:
            return False, f"ended {error:.3f} m from the goal"
        return True, ""

    def set_gripper(self, command: float) -> float:
        self.gripper_command = command
        here = self.tool_position()
        _, rotation = self.world.ee_pose()
        hold = np.tile(here, (self.settle_steps, 1))
        self._execute(hold, np.asarray(rotation), command)
        return float(self.world.gripper_width())


def base_skill_recovery(
    version: SkillVersion, rig: CameraRig, motion: MotionBackend, masks: PerceivedMasks | None = None
) -> Callable[[Any, Any], tuple[bool, str]]:
    """`recover(plant, subtask)` for `harness.dispatch.SimPlant`: runs the base
    skill on the plant's world and driver, through the plant's gate (the shield), and
    keeps each attempt's record in `recover.attempts` (for reflection; an attempt followed
    by another carries the judge's reason that asked for it in `after_resume`, as
    recovery_node records it). `masks`: whose segmentation re-localises the target (None:
    the simulator's, a SIMULATOR ORACLE)."""
    attempts: list[Attempt] = []

    def recover(plant: Any, subtask: Any) -> tuple[bool, str]:
        if attempts:  # the task failed again after the last hand-back
            attempts[-1] = attempts[-1].model_copy(update={"after_resume": plant.last_reason})
        io = SimRecoveryIO(plant.world, plant.driver, rig, motion, gate=plant.gate, masks=masks, subtask_id=subtask.id)
        result = run_base_skill(
            version,
            io,
            target=subtask.target,
            destination=subtask.destination,
            instruction=subtask.instruction,
            pre_failure=io.tool_position(),
            attempt_id=f"{subtask.id}-{len(attempts) + 1}",
        )
        attempts.append(result.attempt)
        resumed = result.outcome in (Outcome.RESUME, Outcome.RESUME_UNVERIFIED)
        return (
            resumed,
            f"{version.skill} v{version.version}: {result.message} ({io.steps} steps, "
            f"{io.chunks_sent} chunks, {io.chunks_blocked} not fully released by the shield)",
        )

    recover.attempts = attempts  # type: ignore[attr-defined]
    return recover
