"""The shield's view of the world: cached sensor data -> the Snapshot a decision uses.

Fails closed: a missing or stale camera (depth or mask), a stale robot state, or a
camera pose outside the world frame raises PerceptionUnavailable with the reason. The
obstacle set is grounded again only when new frames (or a new task) arrived. shield_node
grounds each new frame when it arrives (`refresh`, on a worker of its own), so a chunk's
decision reads a ready obstacle set (`snapshot(prefer_ready=True)`): grounded from frames
that are still fresh, for the current task and holding state; only when there is none (a
new task, the grasp) does the decision ground itself. The holding
latch is fed with every robot state; on the grasp it captures the target's points (from
the obstacle set grounded at that moment) as the carried geometry, placed in the tool frame
with the tool pose of the images' instant (from a short history of robot states): images
arrive up to a second after they were taken, and a moving tool's current pose would smear
the carried object along the motion. An image taken before the grasp shows the target where
it stood still until the fingers closed on it: it is placed with the tool pose of the grasp
(with the pose of its own instant, a view from the approach 8 cm above put the carried
cover 9 cm under the real one, and the shield would not let it be set down).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy.spatial.transform import Rotation

from carryon_robot.core.hand import OPEN_WIDTH_M
from carryon_shield.core.filter import Snapshot
from carryon_shield.core.geometry import (
    GripperGeometry,
    HoldingLatch,
    attached_to_tool,
    carried_spheres,
    inside_hand,
)
from carryon_shield.core.grounding import Grounder, frames_by_camera
from carryon_shield.core.types import FloatArray, ObstacleSet, PerceptionUnavailable, RgbdFrame, RobotState, TaskSpec

# Carried geometry when the target was not visible at grasp time: one sphere just below
# the tool centre point (tool frame x, y, z, r; metres).
DEFAULT_CARRIED = np.array([[0.0, 0.0, 0.03, 0.035]])
# Target points farther than this from the tool centre point are not part of what it carries, m.
CARRIED_REACH_M = 0.2
# Carried spheres closer than this are one piece; a piece this close to the tool centre point
# is held; a piece not held with fewer spheres than CARRIED_MIN_PIECE is mislabelled noise
# (geometry.attached_to_tool).
CARRIED_LINK_M = 0.05
CARRIED_SEED_M = 0.05
CARRIED_MIN_PIECE = 4
# A robot state this close in time to an image is the tool pose of the image's instant, s.
STATE_MATCH_S = 0.05
# Cameras whose instants saw the tool farther apart than this (m, rad) do not place a carried object.
TOOL_STILL_M = 0.005
TOOL_STILL_RAD = 0.05
STATE_HISTORY = 2048  # robot states kept to find the tool pose of an image's instant
HAND_REACH_M = 0.3  # no point of the hand or fingers is farther from the tool centre point


class ShieldPerception:
    """Sensor cache + grounding + holding latch. Times are seconds on one clock."""

    def __init__(
        self,
        grounder: Grounder,
        latch: HoldingLatch,
        *,
        cameras: Sequence[str],
        max_depth_age_s: float,
        max_mask_age_s: float,
        max_state_age_s: float,
        carried_voxel_m: float,
        uses_masks: bool = True,
        self_filter: bool = False,
        self_filter_margin_m: float = 0.01,
        index_arm: bool = False,
    ) -> None:
        self.index_arm = index_arm  # the whole-arm check runs: its point grid is built with the obstacle set
        self.grounder = grounder
        self.latch = latch
        self.cameras = tuple(cameras)
        self.max_depth_age_s = max_depth_age_s
        self.max_mask_age_s = max_mask_age_s
        self.max_state_age_s = max_state_age_s
        self.carried_voxel_m = carried_voxel_m
        self.uses_masks = uses_masks
        self.self_filter = self_filter
        self.self_filter_margin_m = self_filter_margin_m
        self.task = TaskSpec()
        self.frames: dict[str, RgbdFrame] = {}
        self.state: RobotState | None = None
        self._states: deque[RobotState] = deque(maxlen=STATE_HISTORY)
        self._states_lock = threading.Lock()  # fed by the state callback, read by groundings
        self.obstacles: ObstacleSet | None = None
        self._key: tuple[object, ...] | None = None
        # What the last obstacle set was grounded for: task, holding, (camera, depth stamp, mask stamp) each.
        self._ready: tuple[ObstacleSet, tuple[TaskSpec, bool, tuple[tuple[str, float, float], ...]]] | None = None
        self._grounding = threading.Lock()  # one grounding at a time (worker and decision)
        self._capture_pending = False
        self._captured_from = -1
        self._capturing = threading.Lock()  # the carried capture: worker and decision
        self._grasped_at_s = -np.inf  # stamp of the robot state at which the holding latch set
        self.groundings = 0  # how many obstacle sets were built (tests, benchmarks)

    def set_task(self, task: TaskSpec) -> None:
        self.task = task
        self._key = None

    def update_frame(self, frame: RgbdFrame) -> None:
        self.frames[frame.camera] = frame

    def update_state(self, state: RobotState) -> None:
        self.state = state
        with self._states_lock:
            self._states.append(state)
        _, grasped = self.latch.update(state.gripper_width_m, state.gripper_command)
        if grasped:
            self._capture_pending = True
            self._grasped_at_s = state.stamp_s

    def _check_fresh(self, now_s: float) -> list[RgbdFrame]:
        self._check_state(now_s)
        frames = frames_by_camera(self.frames, self.cameras)
        for frame in frames:
            stale = _too_old_or_ahead(
                f"depth from camera {frame.camera!r} is", frame.depth_stamp_s, now_s, self.max_depth_age_s
            )
            if stale is None and self.uses_masks:
                stale = _too_old_or_ahead(
                    f"masks from camera {frame.camera!r} are", frame.mask_stamp_s, now_s, self.max_mask_age_s
                )
            if stale is not None:
                raise PerceptionUnavailable(stale)
        return frames

    def unavailable(self, now_s: float) -> str | None:
        """Why a chunk arriving at `now_s` would fail closed for want of fresh robot state or
        frames (None: both are there); the obstacle set itself is not grounded here."""
        try:
            self._check_fresh(now_s)
        except PerceptionUnavailable as exc:
            return str(exc)
        return None

    def inside_hand(self, frame: RgbdFrame, points: FloatArray) -> npt.NDArray[np.bool_]:
        """The self-filter: which of `frame`'s world points (N, 3) lie inside the hand and
        fingers (exact boxes grown by `self_filter_margin_m`, fingers at the measured width)
        posed at the frame's instant. None inside when no robot state is near that instant
        (perception's robot mask still applies): a hand posed at another instant would hide
        the obstacles beside it."""
        state = self.state_at(frame.depth_stamp_s)
        if state is None or not len(points):
            return np.zeros(len(points), dtype=bool)
        local = (points - state.position) @ state.rotation
        near = np.linalg.norm(local, axis=1) < HAND_REACH_M
        out = np.zeros(len(points), dtype=bool)
        out[near] = inside_hand(local[near], state.gripper_width_m, self.self_filter_margin_m)
        return out

    def ground(self, now_s: float) -> ObstacleSet:
        """The obstacle set from fresh frames (cached until frames or task change)."""
        frames = self._check_fresh(now_s)
        with self._grounding:
            holding = self.latch.holding
            used = tuple((f.camera, f.depth_stamp_s, f.mask_stamp_s) for f in frames)
            key = (self.task, holding, *used)
            if self.obstacles is None or key != self._key:
                self_filter = self.inside_hand if self.self_filter else None
                obstacles = self.grounder.ground(frames, self.task, self_filter, holding=holding)
                obstacles.image_stamps = tuple(depth_s for _, depth_s, _ in used)
                _ = obstacles.grid  # index once per obstacle set, not per chunk
                if self.index_arm:
                    _ = obstacles.arm_grid(holding)  # the whole-arm check's points, likewise
                self.obstacles, self._key = obstacles, key
                self._ready = (obstacles, (self.task, holding, used))  # one assignment: read whole by `ready`
                self.groundings += 1
            return self.obstacles

    def refresh(self, now_s: float) -> bool:
        """Ground the newest frames now if they changed (shield_node's grounding worker,
        whenever frames arrive); False when perception is unavailable (the decision will
        say why)."""
        try:
            self.capture_carried(self.ground(now_s), grasp_only=True)
        except PerceptionUnavailable:
            return False
        return True

    def ready(self, now_s: float) -> ObstacleSet | None:
        """The last obstacle set when it may serve a decision now: grounded for the current
        task and holding state, from every configured camera's frames, each still within its
        age limit (newer frames may be waiting for the worker); else None."""
        if self._ready is None:
            return None
        obstacles, (task, holding, used) = self._ready
        if task != self.task or holding != self.latch.holding:
            return None
        if self.cameras and not set(self.cameras) <= {camera for camera, _, _ in used}:
            return None
        for _, depth_s, mask_s in used:
            if now_s - depth_s > self.max_depth_age_s:
                return None
            if self.uses_masks and now_s - mask_s > self.max_mask_age_s:
                return None
        return obstacles

    def _check_state(self, now_s: float) -> RobotState:
        if self.state is None:
            raise PerceptionUnavailable("no robot state (tool pose, gripper width) yet")
        stale = _too_old_or_ahead("robot state is", self.state.stamp_s, now_s, self.max_state_age_s)
        if stale is not None:
            raise PerceptionUnavailable(stale)
        return self.state

    def state_at(self, stamp: float) -> RobotState | None:
        """The robot state nearest `stamp` (within STATE_MATCH_S), else None."""
        nearest: RobotState | None = None
        with self._states_lock:
            for state in reversed(self._states):  # newest first: images are recent
                if abs(state.stamp_s - stamp) <= STATE_MATCH_S and (
                    nearest is None or abs(state.stamp_s - stamp) < abs(nearest.stamp_s - stamp)
                ):
                    nearest = state
                if state.stamp_s < stamp - STATE_MATCH_S:
                    break
        return nearest

    def tool_at(self, stamps: Sequence[float]) -> tuple[FloatArray, FloatArray] | None:
        """The tool pose (position, rotation) at the instant of images stamped `stamps`: the
        robot state nearest each stamp, the newest of them; None when a stamp has no state
        near it or the tool moved between the stamps."""
        found = [self.state_at(stamp) for stamp in stamps]
        if not found or any(s is None for s in found):
            return None
        states = [s for s in found if s is not None]
        newest = max(states, key=lambda s: s.stamp_s)
        for other in states:
            turn = np.linalg.norm(Rotation.from_matrix(other.rotation.T @ newest.rotation).as_rotvec())
            if np.linalg.norm(other.position - newest.position) > TOOL_STILL_M or turn > TOOL_STILL_RAD:
                return None
        return newest.position, newest.rotation

    def capture_carried(self, obstacles: ObstacleSet, *, grasp_only: bool = False) -> bool:
        """While holding: the carried object's spheres from the target points near the tool,
        captured at the grasp, then grown from the obstacle set of each decision (parts hidden
        by the fingers at grasp time show up once it is lifted). The grounding worker makes the
        capture at the grasp (`grasp_only`: 14.8 ms measured, off the chunk's decision); a
        decision makes it only when the worker has not yet. Growth stays with the decisions:
        grown from every grounding, the model took in more bad views (a re-grasped carrot
        modelled 14 cm tall in 2 of 10 demos). True when it captured now."""
        with self._capturing:
            growth = self._captured_from != self.groundings and not grasp_only
            if not self.latch.holding or not (self._capture_pending or growth):
                return False
            self._captured_from = self.groundings
            # Before the grasp the target stood still: an older image places it with the grasp's pose.
            tool = self.tool_at([max(stamp, self._grasped_at_s) for stamp in obstacles.image_stamps])
            if tool is not None:
                position, rotation = tool
                near = obstacles.target_points[
                    np.linalg.norm(obstacles.target_points - position, axis=1) < CARRIED_REACH_M
                ]
                seen = attached_to_tool(
                    carried_spheres(near, position, rotation, self.carried_voxel_m),
                    CARRIED_LINK_M,
                    CARRIED_SEED_M,
                    CARRIED_MIN_PIECE,
                )
                known = np.zeros((0, 4)) if self._capture_pending else self.latch.carried
                merged = np.unique(np.concatenate([known, seen]).round(6), axis=0)  # a cell seen twice: once
                self.latch.carried = merged if len(merged) else DEFAULT_CARRIED.copy()
                self._capture_pending = False
            elif self._capture_pending and not len(self.latch.carried):
                self.latch.carried = DEFAULT_CARRIED.copy()  # until images of a known tool pose arrive
            return True

    def snapshot(self, now_s: float, *, prefer_ready: bool = False) -> Snapshot:
        """What a decision at `now_s` uses. `prefer_ready`: the set the worker grounded
        when it is still usable (`ready`), grounding here only when it is not."""
        state = self._check_state(now_s)
        obstacles = self.ready(now_s) if prefer_ready else None
        if obstacles is None:
            obstacles = self.ground(now_s)
        self.capture_carried(obstacles)
        width = max(state.gripper_width_m, (1.0 - state.gripper_command) * OPEN_WIDTH_M)
        geometry = GripperGeometry.build(width, self.latch.carried if self.latch.holding else None)
        return Snapshot(obstacles, state, geometry, self.latch.holding)


# A state stamped this much before the last release is from before a clock jump back, seconds.
CLOCK_SLACK_S = 0.1


class CommandTracker:
    """What the driver is executing, from the chunks the shield released: the gripper
    command of the step under way (for the holding latch) and its absolute target (the
    base of delta chunks). Steps run one per chunk.dt from the release time."""

    def __init__(self) -> None:
        self._gripper: FloatArray = np.zeros(1)
        self._positions: FloatArray | None = None
        self._rotations: FloatArray | None = None
        self._start_s = 0.0
        self._dt = 0.05

    def record(
        self, gripper: FloatArray, positions: FloatArray, rotations: FloatArray, *, dt: float, now_s: float
    ) -> None:
        """A released chunk: its gripper commands (n,), absolute targets (n, 3) and (n, 3, 3)."""
        self._gripper = np.asarray(gripper, dtype=np.float64)
        self._positions, self._rotations = positions, rotations
        self._dt, self._start_s = dt, now_s

    def _index(self, now_s: float) -> int:
        return int(np.clip(np.floor((now_s - self._start_s) / self._dt + 1e-6), 0, len(self._gripper) - 1))

    def _forget_if_clock_went_back(self, now_s: float) -> None:
        """A release stamped after `now_s` is from before the clock jumped back (a simulator
        reset put the arm elsewhere): what it commanded is no base for the next chunk."""
        if now_s < self._start_s - CLOCK_SLACK_S:
            self.__init__()  # type: ignore[misc]

    def gripper_command(self, now_s: float) -> float:
        self._forget_if_clock_went_back(now_s)
        return float(self._gripper[self._index(now_s)])

    def target(self, now_s: float) -> tuple[FloatArray | None, FloatArray | None]:
        """Absolute target position (3,) and rotation (3, 3) under way (None before any release,
        or when the clock went back since: the measured pose is the base then)."""
        self._forget_if_clock_went_back(now_s)
        if self._positions is None or self._rotations is None:
            return None, None
        i = self._index(now_s)
        return self._positions[i], self._rotations[i]


def _too_old_or_ahead(what: str, stamp_s: float, now_s: float, limit_s: float) -> str | None:
    """Why an input stamped `stamp_s` must not be used at `now_s` (None: it may). Too old, or
    stamped ahead of the shield's clock by more than the limit: from before a simulator reset
    (the clock jumped back) or from a PC whose clock runs ahead. Both fail closed."""
    age = now_s - stamp_s
    if abs(age) <= limit_s:  # as the gate's observation check: a NaN stamp is not fresh either
        return None
    if age < 0:
        return f"{what} stamped {-age:.2f} s ahead of the shield's clock (limit {limit_s:.2f} s)"
    return f"{what} {age:.2f} s old (limit {limit_s:.2f} s)"
