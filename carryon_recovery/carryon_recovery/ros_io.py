"""`RecoveryIO` over the ROS graph (recovery_node), motion backend `builtin`.

* perceive: the cameras' depth + segmentation + labels + intrinsics + pose (the same
  streams the geometric judge reads), taken after the request (fresh frames once the arm
  has settled), fused into per-object point clouds by the judge's `object_clouds`. No
  ground truth.
* move: the steps of the motion backend (core/motion.py: the tool path resampled at
  `speed_m_s` and checked by IK on the arm's model, or MoveIt's path), sent as ABSOLUTE Cartesian chunks of
  `horizon` steps on `recovery/chunk`. The shield is the only path to the driver: each
  chunk waits for its ShieldEvent and for its released steps to execute; a chunk not
  released whole ends the motion as failed unless it was a retreat or a prefix: then the
  rest of the path is tried again from where the tool is (a few times); a chunk
  rejected for stale or missing perception is sent again after a short wait. The driver (sim_node,
  or the robot's arm adapter) turns targets into joint commands through its own IK.
  Then the tool must come within `tolerance_m` of the goal.
* set_gripper: a hold chunk at the current pose with the gripper command, then the
  measured width from `gripper/width`.

Timing uses the node clock (the simulator's clock under use_sim_time), polled with a
wall-clock timeout so a stopped simulator cannot hang the skill.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from scipy.spatial.transform import Rotation
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64

from carryon_common import convert as common_convert
from carryon_common.camera_streams import CameraStreams
from carryon_common.convert import chunk_to_msg, joint_positions, time_to_msg
from carryon_common.core.clouds import ObservationUnusable, object_clouds
from carryon_interfaces.msg import ShieldEvent
from carryon_recovery.core.base_skill import FloatArray, Seen, seen_from_clouds
from carryon_recovery.core.motion import MotionBackend, recovery_chunk, recovery_turn_rad

STREAMS = ("depth", "segmentation", "labels", "camera_info", "pose")
_POLL_S = 0.01


@dataclass
class Latest:
    """The newest message of every stream recovery_node reads (filled by its subscriptions)."""

    streams: CameraStreams = field(default_factory=CameraStreams)
    ee_pose: PoseStamped | None = None
    joint_state: JointState | None = None
    width: Float64 | None = None
    events: dict[int, ShieldEvent] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keeper(self, camera: str, stream: str) -> Callable[[Any], None]:
        return self.streams.keeper(camera, stream)

    def keep_ee_pose(self, msg: PoseStamped) -> None:
        with self.lock:
            self.ee_pose = msg

    def keep_joint_state(self, msg: JointState) -> None:
        with self.lock:
            self.joint_state = msg

    def keep_width(self, msg: Float64) -> None:
        with self.lock:
            self.width = msg

    def keep_event(self, msg: ShieldEvent) -> None:
        with self.lock:
            self.events[int(msg.chunk_id)] = msg
            if len(self.events) > 256:
                self.events.pop(next(iter(self.events)))


@dataclass(frozen=True)
class MotionParams:
    dt: float = 0.05  # control period of the driver, s
    speed_m_s: float = 0.12
    horizon: int = 8
    settle_s: float = 0.6
    tolerance_m: float = 0.015
    perception_timeout_s: float = 3.0
    shield_timeout_s: float = 3.0
    stride: int = 1  # every pixel: a carrot seen by a 256 px camera is ~60 pixels (every 2nd: 15 points)
    retries: int = 10  # re-sends of a chunk the shield rejected for stale / missing perception
    retry_s: float = 0.3  # wait before a re-send, s
    max_retreats: int = 6  # shield retreats / partial releases after which a motion is given up


class RosRecoveryIO:
    """`publish(msg)` sends an ActionChunk on recovery/chunk; `now_s()` is the node clock."""

    _ids = itertools.count(2_000_000_000)  # recovery chunk ids, apart from the policy's

    def __init__(
        self,
        latest: Latest,
        publish: Callable[[Any], None],
        now_s: Callable[[], float],
        motion: MotionBackend,
        *,
        joint_names: tuple[str, ...] = (),
        cameras: tuple[str, ...],
        subtask_id: str,
        params: MotionParams = MotionParams(),
        cancelled: Callable[[], bool] = lambda: False,
    ) -> None:
        self.latest, self.publish, self.now_s, self.motion = latest, publish, now_s, motion
        self.joint_names = joint_names
        self.cameras, self.subtask_id, self.params, self.cancelled = cameras, subtask_id, params, cancelled
        self.steps = 0
        self.chunks_sent = 0
        self.chunks_blocked = 0
        self.estopped = False
        self.retreated = False  # the last blocked chunk was answered with a retreat or a prefix
        self.last_event = ""

    # -- waiting -----------------------------------------------------------------------
    def _wait_until(self, done: Callable[[], bool], wall_timeout_s: float) -> bool:
        deadline = time.monotonic() + wall_timeout_s
        while not done():
            if self.cancelled() or time.monotonic() > deadline:
                return False
            time.sleep(_POLL_S)
        return True

    def _sleep_node(self, seconds: float) -> None:
        """Wait `seconds` on the node clock (at most 10x that on the wall clock)."""
        until = self.now_s() + seconds
        self._wait_until(lambda: self.now_s() >= until, max(1.0, 10 * seconds))

    # -- RecoveryIO --------------------------------------------------------------------
    def perceive(self, target: str, destination: str) -> Seen | None:
        asked = self.now_s()

        def instants() -> dict[str, dict[str, Any]]:
            # one instant per camera: masks paired with the depth and pose they were made from
            return {camera: self.latest.streams.instant(camera, STREAMS) for camera in self.cameras}

        def fresh() -> bool:
            return all(
                m is not None and common_convert.time_from_msg(m.header.stamp) >= asked
                for msgs in instants().values()
                for m in msgs.values()
            )

        if not self._wait_until(fresh, self.params.perception_timeout_s):
            return None
        views = []
        for camera, msgs in instants().items():
            try:
                views.append(common_convert.camera_view(camera, msgs))
            except ValueError:
                return None
        try:
            clouds = object_clouds(views, stride=self.params.stride)
        except ObservationUnusable:
            return None
        return seen_from_clouds(clouds, target, destination)

    def tool_position(self) -> FloatArray:
        with self.latest.lock:
            pose = self.latest.ee_pose
        if pose is None:
            raise ObservationUnusable("no ee_pose received")
        p = pose.pose.position
        return np.array([p.x, p.y, p.z])

    def joints(self) -> FloatArray | None:
        """Measured arm joints in `joint_names` order (None: no joint state with all of them)."""
        with self.latest.lock:
            msg = self.latest.joint_state
        return None if msg is None else joint_positions(msg, self.joint_names)

    def _tool_rotation(self) -> FloatArray:
        with self.latest.lock:
            pose = self.latest.ee_pose
        if pose is None:
            raise ObservationUnusable("no ee_pose received")
        q = pose.pose.orientation
        out: FloatArray = Rotation.from_quat([q.x, q.y, q.z, q.w]).as_matrix()
        return out

    def _execute(self, positions: FloatArray, rotation: FloatArray, gripper: float) -> bool:
        """One chunk through the shield; True when it was released whole and executed. A
        chunk rejected for stale or missing perception (a transient on a loaded machine)
        is sent again after a short wait, up to `retries` times."""
        for attempt in range(self.params.retries + 1):
            answer = self._execute_once(positions, rotation, gripper)
            if answer is not None:
                return answer
            if attempt < self.params.retries:
                self._sleep_node(self.params.retry_s)
        return False

    def _execute_once(self, positions: FloatArray, rotation: FloatArray, gripper: float) -> bool | None:
        """True / False as `_execute`; None when rejected for stale or missing perception."""
        if self.cancelled():
            return False
        p = self.params
        now = self.now_s()
        chunk = recovery_chunk(next(self._ids), self.subtask_id, positions, rotation, gripper, dt=p.dt, stamp_s=now)
        self.publish(chunk_to_msg(chunk, time_to_msg(now)))
        self.chunks_sent += 1

        def answered() -> bool:
            with self.latest.lock:
                return chunk.chunk_id in self.latest.events

        if not self._wait_until(answered, p.shield_timeout_s):
            self.chunks_blocked += 1
            self.last_event = "the shield did not answer (is shield_node running?)"
            return False
        with self.latest.lock:
            event = self.latest.events[chunk.chunk_id]
        released = int(event.released_steps)
        self._sleep_node(released * p.dt)
        self.steps += released
        if event.decision == ShieldEvent.DECISION_RELEASED_ALL:
            return True
        self.chunks_blocked += 1
        self.last_event = event.reason or f"shield decision {event.decision}"
        if event.decision == ShieldEvent.DECISION_REJECTED_ESTOP:
            self.estopped = True
        # A retreat moved the tool away, a prefix part of the way: the rest can be tried again.
        self.retreated = event.decision in (ShieldEvent.DECISION_RETREAT, ShieldEvent.DECISION_RELEASED_PREFIX)
        transient = (ShieldEvent.DECISION_REJECTED_STALE, ShieldEvent.DECISION_REJECTED_NO_PERCEPTION)
        return None if event.decision in transient else False

    def move(self, positions: FloatArray, rotation: FloatArray, gripper: float) -> tuple[bool, str]:
        """The path in chunks; after a shield retreat (the arm was too close to something)
        or a partial release, the rest of the path is tried again from where the tool is
        now, at most `max_retreats` times; any other block ends the motion."""
        p = self.params
        rest = positions
        retreats = 0
        while True:
            try:
                plan = self.motion.plan(
                    self.joints(),
                    self.tool_position(),
                    rest,
                    rotation,
                    p.speed_m_s * p.dt,
                    turn_rad=recovery_turn_rad(p.dt),
                )
            except ObservationUnusable as exc:
                return False, str(exc)
            if not plan.ok:
                return False, plan.reason
            rotation = plan.rotation if plan.rotation is not None else rotation
            samples = plan.positions
            turning = plan.rotations if plan.rotations is not None else np.tile(rotation, (len(samples), 1, 1))
            blocked = False
            for first in range(0, len(samples), p.horizon):
                if not self._execute(samples[first : first + p.horizon], turning[first : first + p.horizon], gripper):
                    blocked = True
                    break
            if not blocked:
                break
            if self.cancelled():
                return False, "cancelled"
            if not self.retreated or retreats >= p.max_retreats:
                return False, f"the shield did not release the whole motion: {self.last_event}"
            retreats += 1
            nearest = int(np.argmin(np.linalg.norm(rest - self.tool_position(), axis=1)))
            rest = rest[nearest:]
        self._sleep_node(p.settle_s)
        error = float(np.linalg.norm(self.tool_position() - positions[-1]))
        if error > p.tolerance_m:
            return False, f"ended {error:.3f} m from the goal"
        return True, ""

    def set_gripper(self, command: float) -> float:
        p = self.params
        try:
            here, rotation = self.tool_position(), self._tool_rotation()
        except ObservationUnusable:
            return float("nan")
        self._execute(np.tile(here, (max(1, round(p.settle_s / p.dt)), 1)), rotation, command)
        with self.latest.lock:
            width = self.latest.width
        return float("nan") if width is None else float(width.data)
