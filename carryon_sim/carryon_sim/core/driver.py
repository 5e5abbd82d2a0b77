"""The simulated arm's command interface: executes released action chunks step by step.

Every control period the driver takes the next step of the current chunk, turns it
into an absolute tool target (delta steps add to the last commanded target), solves IK
and sets the joint and gripper targets. A step it cannot execute (wrong frame, outside
the workspace, IK failure) ends the chunk and the arm holds; so does the watchdog when
no step arrived for `watchdog_s`. Times are simulation seconds.
"""

from __future__ import annotations

import collections
import enum
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from carryon_common.core.chunk import Chunk, check_executable, tool_targets
from carryon_sim.core.ik import ArmIk
from carryon_sim.core.world import World

# Reachable box for the tool centre point, metres, world frame (above the table top).
WORKSPACE_MIN = np.array([0.15, -0.6, 0.425])
WORKSPACE_MAX = np.array([0.95, 0.6, 1.2])
MAX_IK_ERROR_M = 0.01


class DriverState(enum.StrEnum):
    IDLE = "idle"  # holding, nothing to execute
    EXECUTING = "executing"
    HOLDING = "holding"  # stopped by the watchdog, a rejected step or the e-stop


@dataclass(frozen=True)
class Rejection:
    chunk_id: int
    step: int
    reason: str


class Driver:
    """Executes chunks on a World. `tick(now_s)` once per control period."""

    def __init__(self, world: World, watchdog_s: float) -> None:
        self.world = world
        self.watchdog_s = watchdog_s
        self.ik = ArmIk(world.model, world.robot)
        self.state = DriverState.IDLE
        self.rejections: list[Rejection] = []
        self.steps_executed = 0
        self.estop = False
        self._queue: collections.deque[tuple[int, int, npt.NDArray[np.float64], npt.NDArray[np.float64], float]] = (
            collections.deque()
        )
        self._last_step_s = 0.0
        self.hold()

    def hold(self) -> None:
        """Stop where the arm is: targets become the current joint positions."""
        self._queue.clear()
        self._target_pos, self._target_rot = self.world.ee_pose()
        self.world.set_arm_target(self.world.arm_q())

    def submit(self, chunk: Chunk, now_s: float) -> None:
        """Queue a released chunk (replacing what is left of the previous one)."""
        check_executable(chunk, estop=self.estop)
        self._queue.clear()
        for t in tool_targets(chunk, self._target_pos, self._target_rot):
            self._queue.append((t.chunk_id, t.step, t.position, t.rotation, t.gripper))
        self._last_step_s = now_s
        self.state = DriverState.EXECUTING

    def tick(self, now_s: float) -> None:
        """Execute the next queued step, or hold when the watchdog expires."""
        if self.estop:
            if self.state == DriverState.EXECUTING:
                self.hold()
            self.state = DriverState.HOLDING
            return
        if not self._queue:
            if self.state == DriverState.EXECUTING and now_s - self._last_step_s > self.watchdog_s:
                self.hold()  # the command stream stopped: do not drift
                self.state = DriverState.HOLDING
            return
        chunk_id, index, pos, rot, gripper = self._queue.popleft()
        if np.any(pos < WORKSPACE_MIN) or np.any(pos > WORKSPACE_MAX):
            self._reject(chunk_id, index, f"target {np.round(pos, 3).tolist()} m is outside the workspace")
            return
        solution = self.ik.solve(self.world.arm_q(), pos, rot)
        if solution.position_error_m > MAX_IK_ERROR_M:
            self._reject(chunk_id, index, f"unreachable: IK error {solution.position_error_m * 1000:.1f} mm")
            return
        self.world.set_arm_target(solution.q)
        self.world.set_gripper(gripper)
        self._target_pos, self._target_rot = pos, rot
        self._last_step_s = now_s
        self.steps_executed += 1

    def _reject(self, chunk_id: int, index: int, reason: str) -> None:
        self.rejections.append(Rejection(chunk_id, index, reason))
        self.hold()
        self.state = DriverState.HOLDING
