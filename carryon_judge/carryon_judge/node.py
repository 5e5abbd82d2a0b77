"""judge_node: decides running / success / failed for the active subtask.

* One-shot: the `judge/judge` service (Judge.srv) judges a subtask now against its
  baseline observation (captured when the node first saw the subtask start) with the
  caller's time since progress.
* Monitor mode (`monitor: true`): the node follows `planner/plan_state` (no extra
  interface: the executive already publishes which subtask is active). When a subtask
  becomes active the node captures the baseline, then publishes a Verdict on
  `judge/verdict` every `period_s` until the subtask is no longer active, tracking the
  time since the target's last task-relevant progress itself. While the subtask is
  RECOVERING no verdicts are published; when the policy resumes, the progress clock
  restarts (the baseline is kept).

Missing or stale images (older than `max_image_age_s` on the node clock) give an
UNABLE_TO_JUDGE verdict with the reason (the service answers STATUS_UNAVAILABLE with it).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from std_msgs.msg import Float64

from carryon_common import convert as common_convert
from carryon_common.camera_streams import CameraStreams
from carryon_common.convert import subtask_from_msg
from carryon_common.core import names
from carryon_common.core.clouds import ObservationUnusable
from carryon_common.core.status import implemented
from carryon_common.core.subtask import Subtask
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import qos_for
from carryon_common.request_auth import sign_decision
from carryon_interfaces.msg import PlanState, SubtaskState, Verdict
from carryon_interfaces.srv import Judge as JudgeSrv
from carryon_judge import convert
from carryon_judge.core.backends import make_judge, perception_params, shapes_for
from carryon_judge.core.config import JudgeConfig
from carryon_judge.core.geometry import ShapeTable
from carryon_judge.core.perception import facts_from_perception
from carryon_judge.core.progress import ProgressTracker, tracker_for
from carryon_judge.core.rules import GoalSpec, ObjectFacts, SceneFacts, goal_of
from carryon_judge.core.types import (
    Judge,
    JudgeError,
    JudgeRequest,
    JudgeVerdict,
    Observation,
    VerdictStatus,
)
from carryon_judge.core.vlm import completed_specs

CAPABILITIES = (
    implemented("judge.judge", "one-shot verdict on a subtask against its baseline observation (judge/judge)"),
    implemented("judge.monitor", "periodic verdicts on judge/verdict for the active subtask of planner/plan_state"),
    implemented("judge.backend", "backends vlm, geometric"),
    implemented("judge.observe", "newly revealed contents for observe subtasks"),
)
_STREAMS = ("color", "depth", "segmentation", "labels", "camera_info", "pose")
# What each backend needs from every camera.
_NEEDS = {
    "vlm": ("color",),
    "geometric": ("depth", "segmentation", "labels", "camera_info", "pose"),
}


@dataclass
class _Monitor:
    subtask: Subtask
    baseline: Observation
    started_s: float
    goal: GoalSpec
    tracker: ProgressTracker
    recovering: bool = False  # a recovery skill runs: no verdicts until the policy resumes


class JudgeNode(CarryOnNode):
    def __init__(self, judge: Judge | None = None, shapes: ShapeTable | None = None, **node_kwargs: Any) -> None:
        super().__init__(names.JUDGE_NODE, JudgeConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: JudgeConfig = self.config
        self.judge = judge if judge is not None else make_judge(cfg)
        self.shapes = shapes if shapes is not None else shapes_for(cfg)
        self.set_backends({"judge": self.judge.name})
        self.lock = threading.Lock()
        self.streams = CameraStreams()
        self._ee: PoseStamped | None = None
        self._width: Float64 | None = None
        self._next_id = 0
        self._baselines: dict[str, tuple[Observation, float]] = {}  # subtask id -> (baseline, started_s)
        self._known: dict[str, Subtask] = {}
        self._completed: tuple[str, ...] = ()
        self._monitor: _Monitor | None = None
        types = common_convert.CAMERA_STREAM_TYPES
        for camera in cfg.cameras:
            for stream in _STREAMS:
                topic = names.camera_topic(camera, stream)
                self.create_subscription(types[stream], topic, self.streams.keeper(camera, stream), qos_for(topic))
        self.create_subscription(PoseStamped, names.EE_POSE, lambda m: setattr(self, "_ee", m), qos_for(names.EE_POSE))
        self.create_subscription(
            Float64, names.GRIPPER_WIDTH, lambda m: setattr(self, "_width", m), qos_for(names.GRIPPER_WIDTH)
        )
        self.verdict_pub = self.create_publisher(Verdict, names.VERDICT, qos_for(names.VERDICT))
        self.create_service(JudgeSrv, names.JUDGE, self._on_judge, callback_group=self.service_group)
        if cfg.monitor:
            self.create_subscription(
                PlanState, names.PLAN_STATE, self._on_plan_state, qos_for(names.PLAN_STATE, depth=10)
            )
            self.create_timer(cfg.period_s, self._on_tick, callback_group=MutuallyExclusiveCallbackGroup())
        self.add_readiness_check(self._readiness)
        self.set_ready()

    # -- sensors -------------------------------------------------------------------------
    def snapshot(self) -> Observation:
        """The latest sensor data as an Observation; ObservationUnusable when something the
        backend needs is missing, stale or malformed."""
        with self.lock:
            ee, width = self._ee, self._width
        now = self.now_s()
        views = []
        for camera, msgs in self._instants(now).items():
            try:
                views.append(common_convert.camera_view(camera, msgs))
            except ValueError as exc:
                raise ObservationUnusable(f"camera {camera}: {exc}") from None
        self._next_id += 1
        ee_position = None
        if ee is not None:
            p = ee.pose.position
            ee_position = np.array([p.x, p.y, p.z])
        return Observation(
            observation_id=self._next_id,
            stamp_s=now,
            views=tuple(views),
            ee_position=ee_position,
            gripper_width_m=None if width is None else float(width.data),
        )

    def _instants(self, now: float) -> dict[str, dict[str, Any]]:
        """Each camera's messages of one instant, fresh at `now`; ObservationUnusable says
        which camera lacks what."""
        cfg: JudgeConfig = self.config
        needs = _NEEDS.get(self.judge.name, ("color",))
        out = {}
        for camera in cfg.cameras:
            missing = self.streams.missing(camera, needs)
            if missing:
                raise ObservationUnusable(f"camera {camera}: no {', '.join(missing)} received yet")
            # one instant: masks from perception_node are paired with the depth and pose they were made from
            msgs = dict.fromkeys(_STREAMS) | self.streams.instant(camera, needs)
            if any(msgs[s] is None for s in needs):
                raise ObservationUnusable(f"camera {camera}: no {', '.join(needs)} of one instant yet")
            for stream in needs:
                age = now - common_convert.time_from_msg(msgs[stream].header.stamp)
                if age > cfg.max_image_age_s:
                    raise ObservationUnusable(
                        f"camera {camera}: {stream} is stale ({age:.2f} s old, max_image_age_s {cfg.max_image_age_s})"
                    )
            out[camera] = msgs
        return out

    def _readiness(self) -> str | None:
        """Degraded while a verdict would be UNKNOWN for missing or stale images."""
        try:
            self._instants(self.now_s())
        except ObservationUnusable as exc:
            return f"cannot judge: {exc}"
        return None

    def target_facts(self, observation: Observation, name: str) -> ObjectFacts | None:
        """The target's facts for progress tracking from masks + depth (None without them)."""
        try:
            if any(v.has_geometry for v in observation.views):
                cfg: JudgeConfig = self.config
                return facts_from_perception(observation, self.shapes, perception_params(cfg)).visible(name)
        except (JudgeError, ObservationUnusable):
            return None
        return None

    # -- one-shot service ----------------------------------------------------------------
    def _on_judge(self, request: JudgeSrv.Request, response: JudgeSrv.Response) -> JudgeSrv.Response:
        try:
            subtask = subtask_from_msg(request.subtask)
        except ValueError as exc:
            response.status = JudgeSrv.Response.STATUS_INVALID_ARGUMENT
            response.message = str(exc)
            return response
        if not subtask.id:
            response.status = JudgeSrv.Response.STATUS_INVALID_ARGUMENT
            response.message = "subtask.id is empty"
            return response
        self._known[subtask.id] = subtask
        completed = completed_specs(request.completed_subtask_ids, self._known)
        since = request.since_progress_s
        try:
            current = self.snapshot()
            monitor = self._monitor
            if monitor is not None and monitor.subtask.id == subtask.id:
                baseline, started = monitor.baseline, monitor.started_s
                if since < 0:
                    since = monitor.tracker.update(current.stamp_s, self.target_facts(current, subtask.target))
            elif subtask.id in self._baselines:
                baseline, started = self._baselines[subtask.id]
            else:  # first sight of this subtask: the baseline is now
                baseline, started = current, current.stamp_s
                self._baselines[subtask.id] = (baseline, started)
            verdict = self.judge.judge(
                JudgeRequest(subtask, baseline, current, current.stamp_s - started, since, completed)
            )
        except ObservationUnusable as exc:
            verdict = JudgeVerdict(subtask.id, VerdictStatus.UNABLE_TO_JUDGE, str(exc), self.judge.name, confidence=0.0)
            response.status = JudgeSrv.Response.STATUS_UNAVAILABLE
            response.message = str(exc)
            response.verdict = convert.verdict_to_msg(verdict, self.stamp_now())
            return response
        response.status = JudgeSrv.Response.STATUS_OK
        response.message = f"{verdict.status.label}: {verdict.reason}"
        response.verdict = convert.verdict_to_msg(verdict, self.stamp_now())
        return response

    # -- monitor mode --------------------------------------------------------------------
    def _on_plan_state(self, msg: PlanState) -> None:
        states: dict[str, SubtaskState] = {s.subtask.id: s for s in msg.subtasks}
        for state in states.values():
            try:
                self._known[state.subtask.id] = subtask_from_msg(state.subtask)
            except ValueError as exc:
                self.get_logger().warning(f"plan_state: {exc}")
        self._completed = tuple(i for i, s in states.items() if s.state == SubtaskState.STATE_SUCCEEDED)
        active = msg.active_subtask_id if msg.state == PlanState.STATE_EXECUTING else ""
        current = self._monitor
        if current is not None and current.subtask.id != active:
            self._monitor = None
            self.get_logger().info(f"monitoring stopped: {current.subtask.id}")
        if active and self._monitor is None and active in states and active in self._known:
            self._start(self._known[active])
        monitor = self._monitor
        if monitor is not None and active in states:
            recovering = states[active].state == SubtaskState.STATE_RECOVERING
            if monitor.recovering and not recovering:  # the policy resumes: the stuck clock restarts now
                try:
                    now = self.snapshot()
                    monitor.tracker.start(now.stamp_s, self.target_facts(now, monitor.goal.target))
                except ObservationUnusable:
                    monitor.tracker.start(self.now_s(), None)
                self.get_logger().info(f"{active}: resumed after recovery; progress clock restarted")
            monitor.recovering = recovering

    def _start(self, subtask: Subtask) -> None:
        try:
            baseline = self.snapshot()
        except ObservationUnusable as exc:
            self._publish(
                JudgeVerdict(
                    subtask.id, VerdictStatus.UNABLE_TO_JUDGE, f"no baseline: {exc}", self.judge.name, confidence=0.0
                )
            )
            self._pending = subtask
            return
        self._pending = None
        goal = goal_of(subtask, self.shapes.role)
        base_facts = SceneFacts({}, self.judge.name)
        if any(v.has_geometry for v in baseline.views):
            with contextlib.suppress(JudgeError, ObservationUnusable):
                base_facts = facts_from_perception(baseline, self.shapes, perception_params(self.config))
        tracker = tracker_for(goal, base_facts, self.config.progress_m, self.config.progress_confirm_updates)
        tracker.start(baseline.stamp_s, self.target_facts(baseline, goal.target))
        self._monitor = _Monitor(subtask, baseline, baseline.stamp_s, goal, tracker)
        self._baselines[subtask.id] = (baseline, baseline.stamp_s)
        self.get_logger().info(f"monitoring {subtask.id}: {subtask.objective or subtask.instruction}")

    _pending: Subtask | None = None

    def _on_tick(self) -> None:
        if self._monitor is None and self._pending is not None:
            self._start(self._pending)
        monitor = self._monitor
        if monitor is None or monitor.recovering:
            return
        subtask = monitor.subtask
        try:
            current = self.snapshot()
        except ObservationUnusable as exc:
            self._publish(
                JudgeVerdict(subtask.id, VerdictStatus.UNABLE_TO_JUDGE, str(exc), self.judge.name, confidence=0.0)
            )
            return
        since = monitor.tracker.update(current.stamp_s, self.target_facts(current, monitor.goal.target))
        completed = tuple(self._known[i] for i in self._completed if i in self._known)
        request = JudgeRequest(
            subtask, monitor.baseline, current, current.stamp_s - monitor.started_s, since, completed
        )
        verdict = self.judge.judge(request)
        if self._monitor is monitor:  # still the active subtask
            self._publish(verdict)

    def _publish(self, verdict: JudgeVerdict) -> None:
        self.verdict_pub.publish(
            sign_decision(self.identity, convert.verdict_to_msg(verdict, self.stamp_now()), names.VERDICT)
        )


def main() -> int:
    return run_node(JudgeNode)
