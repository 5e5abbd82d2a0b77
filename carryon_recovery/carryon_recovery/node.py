"""recovery_node: runs recovery skills after a failed verdict (Recover action).

A goal names the failed subtask (target, destination, instruction), the skill (default
`default_skill`) and a version (0 = newest in the versioned library, skills_dir). The
base skill (core/base_skill.py, paper Algorithm 2) re-localises the target from the
cameras' masks and depth, grasps, lifts, checks holding by the measured gripper width,
carries it to a stand-off pose above the destination, checks again, and answers
OUTCOME_RESUME; when that fails it moves to the fallback pose, opens the gripper and
answers OUTCOME_RESUME_UNVERIFIED (the executive resumes anyway; the judge keeps
judging). Every motion is a chunk on `recovery/chunk`, which only the shield forwards to
the driver (ros_io.py). Feedback: the phase and attempt number. Cancel (or the e-stop
seen on the shield's events) stops at the next chunk: OUTCOME_ABORTED. Each attempt's
record (planned vs measured, per operation) is appended to `attempts_file` as JSON lines
(default: the run folder), the input of `carryon reflect --attempts`, once the planner's
plan state shows how its subtask ended: `task_completed` true or false, null for an
attempt outside a plan (core/outcomes.py).

The request's rules (skill and version, robot state, e-stop, the attempt record) are
core/runner.py; this node maps the action, topics and files onto them.

A goal with skill `look` (the planner's observe of a location no camera sees) moves the
tool over the goal's target location (`locations_file`), fingers down, so the wrist
camera sees it (core/look.py): OUTCOME_RESUME when it got there, else OUTCOME_ABORTED.

Motion backends (core/motion.py), chosen by name from motion_backends.py or injected:
`builtin` checks every step of a path by IK on the arm's model (robot_file) before it
moves, so an unreachable path fails early into the fallback; `moveit_py` (robot PCs with
MoveIt 2, moveit_backend.py) lets MoveIt plan the path. Both send the path as shielded
Cartesian steps.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path
from typing import Any

from geometry_msgs.msg import PoseStamped
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64

from carryon_common.convert import CAMERA_STREAM_TYPES
from carryon_common.core import names
from carryon_common.core.config import config_path
from carryon_common.core.errors import CarryOnError
from carryon_common.core.locations import Location, load_locations, locations_path
from carryon_common.core.status import implemented
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import qos_for
from carryon_common.request_auth import OPERATOR_OR_PLANNER, authorize
from carryon_interfaces.action import Recover
from carryon_interfaces.msg import ActionChunk, PlanState, ShieldEvent
from carryon_recovery import convert
from carryon_recovery.core.base_skill import RecoveryIO
from carryon_recovery.core.config import RecoveryConfig
from carryon_recovery.core.library import SkillLibrary
from carryon_recovery.core.look import run_look
from carryon_recovery.core.motion import MotionBackend
from carryon_recovery.core.outcomes import PendingAttempts
from carryon_recovery.core.reflection import Attempt
from carryon_recovery.core.runner import RecoveryRequest, recover
from carryon_recovery.core.types import Outcome, RecoveryResult
from carryon_recovery.motion_backends import make_motion
from carryon_recovery.ros_io import STREAMS, Latest, MotionParams, RosRecoveryIO
from carryon_robot.core.kinematics import load_robot

CAPABILITIES = (
    implemented("recovery.recover", "base re-grasp skill: localise, grasp, check holding, transport, resume"),
    implemented("recovery.motion.builtin", "Cartesian interpolation + IK check on the URDF model, every step shielded"),
    implemented("recovery.motion.moveit_py", "MoveIt 2 plans the path (robot PCs), every step shielded"),
    implemented("recovery.look", "skill look: the wrist camera over a named location (planner's observe)"),
    implemented("recovery.library", "versioned skills/recovery/<skill>/vN.yaml with lineage"),
    implemented("recovery.reflection", "offline reflection producing new skill versions (carryon reflect)"),
)


class RecoveryNode(CarryOnNode):
    """`motion`: an injected motion backend; None builds the configured `motion_backend`."""

    def __init__(self, motion: MotionBackend | None = None, **node_kwargs: Any) -> None:
        super().__init__(names.RECOVERY_NODE, RecoveryConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: RecoveryConfig = self.config
        self.set_backends({"motion": cfg.motion_backend if motion is None else type(motion).__name__})
        self.library = SkillLibrary(self._skills_root())
        robot = load_robot(cfg.robot_file)
        self.joint_names = tuple(robot.joint_names)
        self.motion: MotionBackend = motion if motion is not None else make_motion(robot, cfg)
        self.latest = Latest()
        self.create_subscription(PoseStamped, names.EE_POSE, self.latest.keep_ee_pose, qos_for(names.EE_POSE))
        self.create_subscription(
            JointState, names.JOINT_STATES, self.latest.keep_joint_state, qos_for(names.JOINT_STATES)
        )
        self.create_subscription(Float64, names.GRIPPER_WIDTH, self.latest.keep_width, qos_for(names.GRIPPER_WIDTH))
        self.create_subscription(ShieldEvent, names.SHIELD_EVENTS, self.latest.keep_event, qos_for(names.SHIELD_EVENTS))
        self.chunk_pub = self.create_publisher(ActionChunk, names.RECOVERY_CHUNK, qos_for(names.RECOVERY_CHUNK))
        self._busy = threading.Lock()
        self._watching = False  # camera messages are decoded only while a recovery runs
        self._watch_cameras()
        self._attempts = itertools.count(1)
        # Each attempt is written once its subtask ends, with whether the task was completed then.
        self.pending = PendingAttempts()
        self._pending_lock = threading.Lock()
        self.create_subscription(PlanState, names.PLAN_STATE, self._on_plan_state, qos_for(names.PLAN_STATE))
        self._locations: dict[str, Location] | None = None  # the look skill's, read at the first look
        self._server = ActionServer(
            self,
            Recover,
            names.RECOVER,
            execute_callback=self._on_recover,
            goal_callback=lambda _goal: GoalResponse.REJECT if self._busy.locked() else GoalResponse.ACCEPT,
            cancel_callback=lambda _handle: CancelResponse.ACCEPT,
            callback_group=self.service_group,
        )
        self.set_ready()

    def _skills_root(self) -> Path:
        cfg: RecoveryConfig = self.config
        return config_path(cfg.skills_dir, "skills", "recovery")

    def _watch_cameras(self) -> None:
        """Camera subscriptions, raw: a message is decoded only while a recovery runs. They
        live as long as the node: one made and destroyed per recovery, from the action's
        thread, raced the executor's other threads building their wait sets (rclpy's
        InvalidHandle "destruction was requested" killed the node)."""
        cfg: RecoveryConfig = self.config
        for camera in cfg.cameras:
            for stream in STREAMS:
                kind = CAMERA_STREAM_TYPES[stream]
                topic = names.camera_topic(camera, stream)
                keep = self.latest.keeper(camera, stream)

                def on_raw(data: bytes, kind: Any = kind, keep: Any = keep) -> None:
                    if self._watching:
                        keep(deserialize_message(data, kind))

                self.create_subscription(kind, topic, on_raw, qos_for(topic), raw=True)

    def _on_recover(self, goal_handle: Any) -> Recover.Result:
        result = Recover.Result()
        # Who may start a recovery: an operator or the planner's executive, proven by signature.
        what = f"Recover {goal_handle.request.subtask.id!r}"
        who, why = authorize(self.requests, goal_handle.request, OPERATOR_OR_PLANNER, what, self.get_logger())
        if who is None:
            result.outcome, result.message = Recover.Result.OUTCOME_UNAUTHORIZED, why
            goal_handle.abort()
            return result
        with self._busy:
            self.latest.streams.clear()  # nothing from before this recovery
            self._watching = True
            try:
                outcome = self._recover(goal_handle)
            finally:
                self._watching = False
                self.latest.streams.clear()
        convert.result_to_msg(outcome, result)
        self.get_logger().info(
            f"recovery {outcome.skill} v{outcome.version}: {outcome.outcome.name}: {outcome.message}"
        )
        if outcome.outcome == Outcome.ABORTED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif outcome.outcome in (Outcome.RESUME, Outcome.RESUME_UNVERIFIED):
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    def _recover(self, goal_handle: Any) -> RecoveryResult:
        cfg: RecoveryConfig = self.config
        goal: Recover.Goal = goal_handle.request
        subtask = goal.subtask
        request = RecoveryRequest(
            subtask_id=subtask.id,
            target=subtask.target,
            destination=subtask.destination,
            instruction=subtask.instruction,
            failure_reason=goal.failure_reason,
            skill=goal.skill,
            version=goal.version,
        )
        feedback = Recover.Feedback()
        io: RosRecoveryIO | None = None

        def new_attempt_id() -> str:
            feedback.attempt = next(self._attempts)
            return f"{subtask.id}-{feedback.attempt}"

        def on_phase(phase: str) -> None:
            feedback.phase = phase
            goal_handle.publish_feedback(feedback)

        def cancelled() -> bool:
            return bool(goal_handle.is_cancel_requested) or (io is not None and io.estopped)

        def make_io() -> RosRecoveryIO:
            nonlocal io
            io = RosRecoveryIO(
                self.latest,
                self.chunk_pub.publish,
                self.now_s,
                self.motion,
                joint_names=self.joint_names,
                cameras=tuple(cfg.cameras),
                subtask_id=subtask.id,
                params=MotionParams(speed_m_s=cfg.speed_m_s, tolerance_m=cfg.tolerance_m),
                cancelled=cancelled,
            )
            return io

        return recover(
            self.library,
            request,
            make_io,
            default_skill=cfg.default_skill,
            new_attempt_id=new_attempt_id,
            cancelled=cancelled,
            on_phase=on_phase,
            record=lambda attempt: self._record(attempt, subtask.id, goal.failure_reason),
            log=self.get_logger().info,
            look=self._look,
        )

    def _look(self, io: RecoveryIO, location: str) -> tuple[Outcome, str]:
        """The look skill; the locations file is read at the first look (kept once read)."""
        cfg: RecoveryConfig = self.config
        if self._locations is None:
            try:
                self._locations = load_locations(locations_path(cfg.locations_file))
            except CarryOnError as exc:
                return Outcome.ABORTED, f"look: {exc}"
        return run_look(io, location, self._locations, tool_height_m=cfg.look_tool_height_m)

    def _record(self, attempt: Attempt, subtask_id: str, failure_reason: str) -> None:
        with self._pending_lock:
            ready = self.pending.add(attempt, subtask_id, failure_reason)
        for done in ready:
            self._write(done)

    def _on_plan_state(self, msg: PlanState) -> None:
        with self._pending_lock:
            ready = self.pending.update(convert.plan_view(msg))
        for done in ready:
            self._write(done)

    def destroy_node(self) -> None:
        with self._pending_lock:
            ready = self.pending.flush()
        for done in ready:
            self._write(done)
        super().destroy_node()

    def _write(self, attempt: Attempt) -> None:
        cfg: RecoveryConfig = self.config
        path = Path(cfg.attempts_file or Path(os.environ.get(names.RUN_DIR_ENV, ".")) / "recovery_attempts.jsonl")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as out:
                out.write(attempt.model_dump_json() + "\n")
        except OSError as exc:
            self.get_logger().error(f"attempt not recorded in {path}: {exc}")


def main() -> int:
    return run_node(RecoveryNode)
