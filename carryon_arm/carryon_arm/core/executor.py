"""Executes released chunks on a real arm, step by step, the way sim_node does in simulation.

Every control period `tick` takes the next step of the current chunk as an absolute tool
target (delta steps add to the last commanded target), checks it against the workspace box
and the shared MotionLimits (carryon_common.core.driver; the config may tighten its joint
step and IK error): the tool's move and turn from the last target, the IK's position and
rotation error, and each joint's move from the last commanded joints (the measured ones
before a chunk's first command), and returns the command for the controller. A new chunk
replaces what is left of the previous one. Times are seconds on one clock.

The arm holds when a step fails a check, when no step arrived for `watchdog_s` after the
chunk's last one (the watchdog), when the joint states go stale, on e-stop (which also
refuses every chunk until released) and whenever `blocked` says so (the e-stop latch and
shield heartbeat of the node's CommandGuard, too many joint-state publishers); while
`paused` (a late heartbeat, not yet the timeout) it stops and the chunk waits.

What a hold (and a pause) sends — never a place the driver did not choose itself:

* while a chunk executes: the driver's own last command (the joints, or the tool target,
  the controller is tracking), as a hold with zero velocity: the arm ends the step in
  progress (at most one step, 5 cm) and stops there. Only before any command was sent: the
  last *accepted* measurement;
* while no chunk executes: nothing. The controller already holds the driver's last target
  (or its own at start-up); nothing of the driver's is moving, and re-sending an old target
  would move an arm that was jogged since;
* with stale (or no) joint states: nothing. The controller keeps its last target.

Measurements reach `state` only through the JointStateGate (core/joint_states.py): a joint
state that jumps beyond what the arm can move is refused and never becomes a hold, an IK
seed or a published pose.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from carryon_arm.core.config import ArmAdapterConfig
from carryon_arm.core.joint_states import JointStateGate, JointStateLimits, RobotState, StateStatus, StateVerdict
from carryon_common.core.chunk import Chunk, InvalidChunk, ToolTarget, tool_targets
from carryon_common.core.driver import (
    DriverState,
    Rejection,
    check_executable,
    ik_beyond_limits,
    joint_step_beyond_limits,
    step_beyond_limits,
    turn_beyond_limits,
)
from carryon_robot.core.kinematics import ArmKinematics

FloatArray = npt.NDArray[np.float64]


__all__ = ["ChunkExecutor", "Command", "RobotState", "StateVerdict"]


@dataclass(frozen=True)
class Command:
    """What to send: joint targets and/or the tool pose in `world`; gripper width (m) or None."""

    hold: bool
    q: FloatArray
    position: FloatArray
    rotation: FloatArray
    gripper_width_m: float | None
    duration_s: float  # time to reach the target


class ChunkExecutor:
    def __init__(self, kinematics: ArmKinematics, config: ArmAdapterConfig, *, open_width_m: float = 0.08) -> None:
        self.kinematics = kinematics
        self.open_width_m = open_width_m
        self.config = config
        self.limits = config.limits  # the shared MotionLimits, as the config tightens them
        self.mode = DriverState.IDLE
        self.estop = False
        # Why no step may run now (None: they may); arm_adapter_node sets its CommandGuard's.
        self.blocked: Callable[[float], str | None] = lambda _now_s: None
        # Why steps must wait now (a late heartbeat): the arm stops, the chunk is kept.
        self.paused: Callable[[float], str | None] = lambda _now_s: None
        self.pausing = False
        self.gate = JointStateGate(
            JointStateLimits(
                tuple(kinematics.joint_names),
                kinematics.lower,
                kinematics.upper,
                config.max_joint_speed_rad_s,
                config.joint_state_tolerance_rad,
                config.state_timeout_s,
                config.joint_state_anchor_count,
                config.joint_state_reanchor_count,
            )
        )
        self.rejections: list[Rejection] = []
        self.steps_sent = 0
        self._queue: collections.deque[ToolTarget] = collections.deque()
        self._dt = 1.0 / config.control_rate_hz
        self._last_step_s = 0.0
        self._target: tuple[FloatArray, FloatArray] | None = None  # last commanded tool pose
        self._q_command: FloatArray | None = None  # last commanded joints (IK seed)
        self._sent: Command | None = None  # the last command sent: what the controller is tracking
        self._lo = np.asarray(config.workspace_min)
        self._hi = np.asarray(config.workspace_max)

    # -- inputs ---------------------------------------------------------------------------
    @property
    def state(self) -> RobotState | None:
        """The newest accepted measurement (None before the first position was taken)."""
        return self.gate.accepted

    def update_state(self, state: RobotState, *, may_reanchor: bool = True) -> StateVerdict:
        """Offer a measurement to the JointStateGate; only an accepted one becomes `state`.
        `may_reanchor`: the caller sees no reason against re-anchoring (one joint-state
        publisher); it never happens while a chunk executes."""
        verdict = self.gate.check(state, may_reanchor=may_reanchor and self.mode != DriverState.EXECUTING)
        if verdict.status == StateStatus.ANCHORED:
            self._sent = self._target = self._q_command = None  # going back to them would move the arm
        return verdict

    def stale_reason(self, now_s: float) -> str | None:
        if self.state is None:
            return f"no joint states yet on {self.config.joint_states_topic}"
        age = now_s - self.state.stamp_s
        if age > self.config.state_timeout_s:
            return f"joint states are stale ({age:.2f} s old, limit {self.config.state_timeout_s} s)"
        return None

    def submit(self, chunk: Chunk, now_s: float) -> None:
        """Queue a released chunk, replacing the rest of the previous one; InvalidChunk says why not."""
        check_executable(chunk, estop=self.estop, limits=self.limits)
        blocked = self.blocked(now_s)
        if blocked is not None:
            raise InvalidChunk(blocked)
        stale = self.stale_reason(now_s)
        if stale is not None:
            raise InvalidChunk(stale)
        if self._target is None or self.mode != DriverState.EXECUTING:
            self._target = self.measured_pose()
            self._q_command = None
        self._queue = collections.deque(tool_targets(chunk, *self._target))
        self._dt = chunk.dt
        self._last_step_s = now_s
        self.mode = DriverState.EXECUTING

    def set_estop(self, active: bool, now_s: float) -> Command | None:
        """Engage / release the e-stop; engaging returns the hold command."""
        was, self.estop = self.estop, active
        if active and not was:
            return self.hold(now_s)
        return None

    # -- control period -------------------------------------------------------------------
    def tick(self, now_s: float) -> Command | None:
        """The command for this period, or None when there is nothing new to send."""
        if self.mode != DriverState.EXECUTING:
            return None
        stopped = self._stopped(now_s)
        if stopped is not None:
            return stopped[0]
        self.pausing = False
        if not self._queue:
            if now_s - self._last_step_s > self.config.watchdog_s:
                return self.hold(now_s)  # the command stream stopped: do not drift
            return None
        step = self._queue.popleft()
        if np.any(step.position < self._lo) or np.any(step.position > self._hi):
            return self._refuse(step, f"target {np.round(step.position, 3).tolist()} m is outside the workspace", now_s)
        too_far = None
        if self._target is not None:
            too_far = step_beyond_limits(self._target[0], step.position, self._dt, self.limits) or turn_beyond_limits(
                self._target[1], step.rotation, self._dt, self.limits
            )
        if too_far is not None:  # each step again, whatever the chunk's check said (MotionLimits)
            return self._refuse(step, too_far, now_s)
        command = self._command(step)
        if isinstance(command, str):
            return self._refuse(step, command, now_s)
        self._target = (step.position, step.rotation)
        self._last_step_s = now_s
        self.steps_sent += 1
        self._sent = command
        return command

    def guard(self, now_s: float) -> Command | None:
        """Between control periods: the hold (or pause) command when the e-stop, `blocked`,
        stale joint states or a late heartbeat stop the arm now; None when nothing changes."""
        if self.mode != DriverState.EXECUTING:
            return None
        stopped = self._stopped(now_s)
        return None if stopped is None else stopped[0]

    def _stopped(self, now_s: float) -> tuple[Command | None] | None:
        """(the command to send, or None when already paused) when no step may run now; None
        when steps may go on."""
        if self.estop:
            return (self.hold(now_s),)
        blocked = self.blocked(now_s)
        if blocked is not None:
            self.rejections.append(Rejection(-1, -1, f"arm holds: {blocked}"))
            return (self.hold(now_s),)
        stale = self.stale_reason(now_s)
        if stale is not None:
            self.rejections.append(Rejection(-1, -1, f"arm holds: {stale}"))
            return (self.hold(now_s),)
        if self._queue and self.paused(now_s) is not None:
            self._last_step_s = now_s  # waiting on the shield is not a silent command stream
            if self.pausing:
                return (None,)
            self.pausing = True  # stop where the arm is; the targets of the chunk stay queued
            return (self._pause_command(),)
        return None

    def _command(self, step: ToolTarget) -> Command | str:
        assert self.state is not None
        width = self.open_width_m * (1.0 - step.gripper)
        if self.config.interface == "pose_target":
            q = self.state.q
        else:
            previous = self._q_command if self._q_command is not None else self.state.q
            solution = self.kinematics.inverse(previous, step.position, step.rotation)
            refused = ik_beyond_limits(solution.position_error_m, solution.rotation_error_rad, self.limits)
            if refused is None:  # from the last commanded joints (the measured ones before the first)
                refused = joint_step_beyond_limits(previous, solution.q, self._dt, self.limits)
            if refused is not None:
                return refused
            q = self._q_command = solution.q
        return Command(False, q, step.position, step.rotation, width, self._dt)

    def _refuse(self, step: ToolTarget, reason: str, now_s: float) -> Command | None:
        self.rejections.append(Rejection(step.chunk_id, step.step, reason))
        return self.hold(now_s)

    def measured_pose(self) -> tuple[FloatArray, FloatArray]:
        assert self.state is not None
        return self.kinematics.forward(self.state.q)

    def _stop_command(self) -> Command | None:
        """Stop at the driver's own last command (zero velocity), or at the last accepted
        measurement when nothing was sent yet; None without a fresh state to judge by."""
        if self._sent is not None:
            sent = self._sent
            return Command(True, sent.q.copy(), sent.position, sent.rotation, None, self._dt)
        if self.state is None:
            return None
        return Command(True, self.state.q.copy(), *self.measured_pose(), None, self._dt)

    def _pause_command(self) -> Command | None:
        """Stop at the last command, keeping the queue and the last target (the next step's
        limits are checked from it, as if no pause had happened)."""
        return self._stop_command()

    def hold(self, now_s: float) -> Command | None:
        """Stop the chunk. While one executes, the arm ends the step in progress: the hold
        is the last command (module docstring). Otherwise, and with stale (or no) joint
        states, nothing is sent: the controller keeps the last target, and an old or
        received position is no place to go."""
        executing = self.mode == DriverState.EXECUTING
        self._queue.clear()
        self.mode = DriverState.HOLDING
        self._q_command = None
        if not executing or self.stale_reason(now_s) is not None:
            return None
        command = self._stop_command()
        if command is not None:
            self._target = (command.position, command.rotation)
            self._sent = command
        return command
