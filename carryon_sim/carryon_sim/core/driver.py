"""The simulated arm's command interface: executes released action chunks step by step.

Every control period the driver takes the next step of the current chunk, turns it
into an absolute tool target (delta steps add to the last commanded target), solves IK
and sets the joint and gripper targets. A step it cannot execute (wrong frame, outside
the workspace, beyond the motion limits of carryon_common.core.driver.MotionLimits: the
tool's move and turn from the last target, the IK's position and rotation error, each
joint's move from the last commanded joints) ends the chunk and the arm holds; so does
the watchdog when no step arrived for `watchdog_s`, and `blocked` (the e-stop latch and
the shield's heartbeat of carryon_common.core.command_auth.CommandGuard, in a graph).
While `paused` (a late heartbeat, not yet the timeout) the arm stops at its current step's
target and the chunk waits; it goes on when the heartbeat returns. Times are simulation
seconds.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np

from carryon_common.core.chunk import Chunk, InvalidChunk, ToolTarget, tool_targets
from carryon_common.core.driver import (
    WORKSPACE_MAX,
    WORKSPACE_MIN,
    DriverState,
    Rejection,
    check_executable,
    ik_beyond_limits,
    joint_step_beyond_limits,
    step_beyond_limits,
    turn_beyond_limits,
)
from carryon_sim.core.ik import ArmIk
from carryon_sim.core.world import World

_LO, _HI = np.array(WORKSPACE_MIN), np.array(WORKSPACE_MAX)  # the reachable box of the tool centre point


class Driver:
    """Executes chunks on a World. `tick(now_s)` once per control period; `guard(now_s)`
    between them stops the arm without waiting for the next step."""

    def __init__(self, world: World, watchdog_s: float, ik: ArmIk | None = None) -> None:
        self.world = world
        self.watchdog_s = watchdog_s
        self.ik = ik if ik is not None else ArmIk(world.model, world.robot)
        self.state = DriverState.IDLE
        self.rejections: list[Rejection] = []
        self.steps_executed = 0
        self.estop = False
        # Why no step may run now (None: they may); sim_node sets its CommandGuard's.
        self.blocked: Callable[[float], str | None] = lambda _now_s: None
        # Why steps must wait now (a late heartbeat): no new step, the chunk is kept.
        self.paused: Callable[[float], str | None] = lambda _now_s: None
        self._queue: collections.deque[ToolTarget] = collections.deque()
        self._last_step_s = 0.0
        self._dt = 0.05
        self.hold()

    def hold(self) -> None:
        """Stop where the arm is: targets become the current joint positions."""
        self._queue.clear()
        self._target_pos, self._target_rot = self.world.ee_pose()
        self.world.set_arm_target(self.world.arm_q())

    @property
    def target(self) -> tuple[np.ndarray, np.ndarray]:
        """The tool pose the arm is commanded to now: position (3,) metres and rotation
        matrix (3, 3), world frame (the last executed step's target, or where it holds)."""
        return self._target_pos, self._target_rot

    def submit(self, chunk: Chunk, now_s: float) -> None:
        """Queue a released chunk (replacing what is left of the previous one)."""
        check_executable(chunk, estop=self.estop)
        blocked = self.blocked(now_s)
        if blocked is not None:
            raise InvalidChunk(blocked)
        self._queue = collections.deque(tool_targets(chunk, self._target_pos, self._target_rot))
        self._dt = chunk.dt
        self._last_step_s = now_s
        self.state = DriverState.EXECUTING

    def tick(self, now_s: float) -> None:
        """Execute the next queued step, or hold when the watchdog expires."""
        if self.guard(now_s):
            return
        if not self._queue:
            if self.state == DriverState.EXECUTING and now_s - self._last_step_s > self.watchdog_s:
                self.hold()  # the command stream stopped: do not drift
                self.state = DriverState.HOLDING
            return
        step = self._queue.popleft()
        if np.any(step.position < _LO) or np.any(step.position > _HI):
            self._reject(step, f"target {np.round(step.position, 3).tolist()} m is outside the workspace")
            return
        too_far = step_beyond_limits(self._target_pos, step.position, self._dt) or turn_beyond_limits(
            self._target_rot, step.rotation, self._dt
        )
        if too_far is not None:  # each step again, whatever the chunk's check said (MotionLimits)
            self._reject(step, too_far)
            return
        solution = self.ik.solve(self.world.arm_q(), step.position, step.rotation)
        # The joints are checked from the last commanded ones (the measured ones after a hold).
        refused = ik_beyond_limits(solution.position_error_m, solution.rotation_error_rad) or (
            joint_step_beyond_limits(self.world.arm_target(), solution.q, self._dt)
        )
        if refused is not None:
            self._reject(step, refused)
            return
        self.world.set_arm_target(solution.q)
        self.world.set_gripper(step.gripper)
        self._target_pos, self._target_rot = step.position, step.rotation
        self._last_step_s = now_s
        self.steps_executed += 1

    def guard(self, now_s: float) -> bool:
        """Stop the arm now when the e-stop, `blocked` or `paused` says so (the part of `tick`
        run between steps too); True when no step may run now."""
        if self.estop:
            if self.state == DriverState.EXECUTING:
                self.hold()
            self.state = DriverState.HOLDING
            return True
        blocked = self.blocked(now_s)
        if blocked is not None:
            if self.state == DriverState.EXECUTING:
                self.rejections.append(Rejection(-1, -1, f"arm holds: {blocked}"))
                self.hold()
                self.state = DriverState.HOLDING
            return True
        if self._queue and self.paused(now_s) is not None:
            # No new step: the arm ends the one in progress (released, at most one step on) and
            # stops there, the rest of the chunk queued. Not at the measured joints: reversing
            # mid-step jerks what the fingers carry, and a late beat is no emergency.
            self._last_step_s = now_s  # waiting on the shield is not a silent command stream
            return True
        return False

    def _reject(self, step: ToolTarget, reason: str) -> None:
        self.rejections.append(Rejection(step.chunk_id, step.step, reason))
        self.hold()
        self.state = DriverState.HOLDING
