"""The executive's Dispatch over the ROS graph (planner_node's Assist action).

* `run_vla` is `core.executive.run_vla` over `RosPlant`: the shield's SetTask (and the
  simulator's, when there is one) names the subtask's target, source and destination;
  RunPolicy runs the VLA with a step budget; every `judge_period_s` the judge_node's Judge
  service gives a verdict (the judge keeps the subtask's baseline from its first sight and,
  in monitor mode, the time since progress); on a failed verdict RunPolicy is cancelled
  (suspended), the Recover action runs, and the original instruction is sent again with
  the remaining budget.
* `observe` reports what perception sees at a named location (`observe_source:
  perception`, both profiles): it waits for `observe_scenes` perception/scenes taken after
  the request and lists the objects in the location's region that at least half of them
  show (from the planner's own `locations_file`; core/observe.py). When most scenes say
  no camera sees the region (`observe_look`), recovery_node's `look` skill first moves
  the wrist camera over it (through the shield), then the scenes are read again. No fresh
  scene, cameras that could not be perceived in most scenes, or a failed look motion fail
  the observe with the reason ("could not see"). `none` fails every observe subtask.
* `say` hands the sentence to `on_say` (the Assist feedback and the node's log).
* A VLA subtask the judge calls a success is handed to `on_succeeded` (planner_node
  records where its target now is in scene memory).

Cancelling (the operator cancels Assist) is checked while waiting: the running policy
goal is cancelled, so the policy stops and the driver holds the arm; nothing else starts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import PoseStamped

from carryon_common.convert import time_from_msg
from carryon_common.core import names
from carryon_common.core.errors import CarryOnError
from carryon_common.core.locations import Location, load_locations, locations_path
from carryon_common.node import CarryOnNode, GoalRun, ServiceUnavailable
from carryon_interfaces.action import Recover, RunPolicy
from carryon_interfaces.msg import PerceivedScene
from carryon_interfaces.msg import Verdict as VerdictMsg
from carryon_interfaces.srv import Judge, SetTask
from carryon_planner.convert import planned_subtask_to_msg
from carryon_planner.core.config import PlannerConfig
from carryon_planner.core.executive import Report, Verdict, run_vla
from carryon_planner.core.observe import Seen, agree, describe_look, visible_items
from carryon_planner.core.plan import PlannedSubtask
from carryon_planner.core.session import Cancelled

_VERDICTS = {
    VerdictMsg.STATUS_RUNNING: Verdict.RUNNING,
    VerdictMsg.STATUS_SUCCESS: Verdict.SUCCESS,
    VerdictMsg.STATUS_FAILED: Verdict.FAILED,
    VerdictMsg.STATUS_UNABLE_TO_JUDGE: Verdict.UNABLE,
}
_POLICY_ENDED_BADLY = {
    RunPolicy.Result.STATUS_REFUSED: "refused",
    RunPolicy.Result.STATUS_FAILED: "failed",
    RunPolicy.Result.STATUS_NOT_IMPLEMENTED: "not implemented",
}
_POLL_S = 0.05


class DispatchError(CarryOnError):
    """A node the subtask needs is missing or refused; the subtask fails with this reason."""


@dataclass
class Sensors:
    """The latest robot state and perceived scene the dispatcher reads (kept by
    planner_node's subscriptions)."""

    ee_pose: PoseStamped | None = None
    scene: PerceivedScene | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keep_ee_pose(self, msg: PoseStamped) -> None:
        with self.lock:
            self.ee_pose = msg

    def keep_scene(self, msg: PerceivedScene) -> None:
        with self.lock:
            self.scene = msg


class RosPlant:
    """`VlaPlant` over planner_node's service and action clients."""

    def __init__(
        self,
        node: CarryOnNode,
        config: PlannerConfig,
        sensors: Sensors,
        *,
        cancelled: Callable[[], bool],
        completed: Sequence[str],
        on_recovering: Callable[[str, bool, str], None] = lambda _id, _active, _why: None,
    ) -> None:
        self.node, self.config, self.sensors = node, config, sensors
        self.cancelled, self.completed, self.on_recovering = cancelled, completed, on_recovering
        self._goal: GoalRun | None = None
        self._steps = 0
        self._started = TimeMsg()
        self._last_reason = ""
        self._sim_task: bool | None = None  # whether sim/set_task exists (asked once)

    # -- helpers ---------------------------------------------------------------------
    def _wait(self, seconds: float) -> None:
        """Sleep `seconds`, raising Cancelled as soon as the request is cancelled."""
        deadline = time.monotonic() + seconds
        while True:
            if self.cancelled():
                raise Cancelled("cancelled by the operator")
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(_POLL_S, left))

    def _call(self, srv: Any, name: str, request: Any, timeout_s: float | None = None) -> Any:
        try:
            return self.node.call_service(srv, name, request, timeout_s or self.config.service_timeout_s)
        except ServiceUnavailable as exc:
            raise DispatchError(str(exc)) from None

    # -- VlaPlant --------------------------------------------------------------------
    def set_task(self, subtask: PlannedSubtask, permitted: tuple[str, ...] = ()) -> None:
        request = SetTask.Request(
            subtask_id=subtask.id,
            target=subtask.target,
            source=subtask.source,
            destination=subtask.destination,
            permitted_contacts=list(permitted),
        )
        answer = self._call(SetTask, names.SHIELD_SET_TASK, request)
        if answer.status != SetTask.Response.STATUS_OK:
            raise DispatchError(f"shield/set_task refused: {answer.message}")
        if self._sim_task is not False:  # the simulator's contact monitor, when there is one
            try:
                wait_s = 1.0 if self._sim_task is None else 5.0
                sim = self.node.call_service(SetTask, names.SIM_SET_TASK, request, wait_s)
                self._sim_task = True
                if sim.status != SetTask.Response.STATUS_OK:  # evaluation only: the subtask goes on, said loudly
                    self.node.get_logger().warning(
                        f"{subtask.id}: the simulator's contact monitor refused the task ({sim.message}): "
                        "its contacts will be counted as unpermitted"
                    )
            except ServiceUnavailable:
                self._sim_task = False
        self._started = self.node.stamp_now()

    def start_policy(self, subtask: PlannedSubtask, budget: int) -> None:
        self._steps = 0

        def feedback(msg: RunPolicy.Feedback) -> None:
            self._steps = int(msg.steps_executed)

        goal = RunPolicy.Goal(instruction=subtask.instruction, subtask_id=subtask.id, step_budget=budget)
        try:
            self._goal = self.node.start_goal(RunPolicy, names.RUN_POLICY, goal, self.config.action_timeout_s, feedback)
        except ServiceUnavailable as exc:
            raise DispatchError(str(exc)) from None

    def policy_steps(self) -> tuple[int, bool]:
        goal = self._goal
        if goal is None or not goal.done():
            return self._steps, False
        ended = goal.wait(0.0)
        assert ended is not None
        result = ended[1]
        if result.status in _POLICY_ENDED_BADLY:
            raise DispatchError(f"policy {_POLICY_ENDED_BADLY[result.status]}: {result.message}")
        return int(result.steps_executed), True

    def suspend_policy(self) -> int:
        goal, self._goal = self._goal, None
        if goal is None:
            return self._steps
        ended = goal.cancel(self.config.action_timeout_s)
        if ended is None:
            raise DispatchError(f"policy/run did not stop within {self.config.action_timeout_s:.0f} s of the cancel")
        return int(ended[1].steps_executed)

    def verdict(self, subtask: PlannedSubtask) -> tuple[Verdict, str]:
        self._wait(self.config.judge_period_s)
        request = Judge.Request(
            subtask=planned_subtask_to_msg(subtask),
            completed_subtask_ids=list(self.completed),
            started=self._started,
            since_progress_s=-1.0,
        )
        try:
            answer = self.node.call_service(Judge, names.JUDGE, request, self.config.service_timeout_s)
        except ServiceUnavailable as exc:
            return Verdict.UNABLE, f"judge: {exc}"
        if answer.status != Judge.Response.STATUS_OK:
            return Verdict.UNABLE, f"judge: {answer.message}"
        self._last_reason = answer.verdict.reason
        return _VERDICTS.get(answer.verdict.status, Verdict.UNABLE), answer.verdict.reason

    def recover(self, subtask: PlannedSubtask) -> tuple[bool, str]:
        with self.sensors.lock:
            pose = self.sensors.ee_pose or PoseStamped()
        goal = Recover.Goal(
            subtask=planned_subtask_to_msg(subtask),
            skill=self.config.recovery_skill,
            version=0,
            failure_reason=self._last_reason,
            pre_failure_pose=pose,
        )
        self.on_recovering(subtask.id, True, f"recovering: {self._last_reason}")

        def feedback(msg: Recover.Feedback) -> None:
            self.on_recovering(subtask.id, True, f"recovery attempt {msg.attempt}: {msg.phase}")

        try:
            result = self.run_recover(goal, feedback)
        except DispatchError as exc:
            return False, str(exc)
        finally:
            self.on_recovering(subtask.id, False, "")
        label = f"{result.skill} v{result.version}: {result.message}" if result.skill else result.message
        if result.outcome in (Recover.Result.OUTCOME_RESUME, Recover.Result.OUTCOME_RESUME_UNVERIFIED):
            return True, label
        return False, label

    def run_recover(self, goal: Recover.Goal, feedback: Callable[[Any], None] | None = None) -> Any:
        """One Recover goal to its result (recovery and the observe's look motion).
        DispatchError when recovery_node is missing or the goal outlives
        `recover_timeout_s`; Cancelled when the operator cancels (the goal is cancelled too)."""
        try:
            run = self.node.start_goal(Recover, names.RECOVER, goal, self.config.action_timeout_s, feedback)
        except ServiceUnavailable as exc:
            raise DispatchError(f"recovery unavailable: {exc}") from None
        deadline = time.monotonic() + self.config.recover_timeout_s
        while (ended := run.wait(_POLL_S)) is None:
            if self.cancelled():
                run.cancel(self.config.action_timeout_s)
                raise Cancelled("cancelled by the operator during recovery")
            if time.monotonic() > deadline:
                run.cancel(self.config.action_timeout_s)
                raise DispatchError(f"recovery did not finish within {self.config.recover_timeout_s:.0f} s")
        return ended[1]

    def stop(self) -> None:
        """Stop whatever runs (cancel, failure): the policy is cancelled, the arm holds."""
        if self._goal is not None:
            try:
                self.suspend_policy()
            except DispatchError as exc:
                self.node.get_logger().error(f"stopping the policy: {exc}")


def _seen(obj: Any) -> Seen:
    """A PerceivedObject as observe needs it."""
    low, high = obj.bbox_min, obj.bbox_max
    size = max(high.x - low.x, high.y - low.y, high.z - low.z)
    return Seen(obj.label, obj.centroid.x, obj.centroid.y, obj.support, held=not obj.support, size_m=size)


class RosDispatch:
    """`Dispatch` for the executive over the ROS graph."""

    def __init__(
        self,
        node: CarryOnNode,
        config: PlannerConfig,
        sensors: Sensors,
        *,
        cancelled: Callable[[], bool],
        on_say: Callable[[str], None] = lambda _text: None,
        on_recovering: Callable[[str, bool, str], None] = lambda _id, _active, _why: None,
        on_succeeded: Callable[[PlannedSubtask], None] = lambda _subtask: None,
    ) -> None:
        self.node, self.config, self.sensors = node, config, sensors
        self.cancelled, self.on_say, self.on_succeeded = cancelled, on_say, on_succeeded
        self.completed: list[str] = []
        self.said: list[str] = []
        self._locations: dict[str, Location] | None = None
        self.plant = RosPlant(
            node, config, sensors, cancelled=cancelled, completed=self.completed, on_recovering=on_recovering
        )

    def run_vla(self, subtask: PlannedSubtask, permitted: tuple[str, ...] = ()) -> Report:
        if self.cancelled():
            return Report(False, "cancelled by the operator")
        try:
            report = run_vla(
                subtask,
                self.plant,
                budget=self.config.policy_step_budget,
                max_recoveries=self.config.max_recoveries,
                permitted=permitted,
            )
        except (Cancelled, DispatchError) as exc:
            self.plant.stop()
            return Report(False, str(exc))
        if report.succeeded:
            self.completed.append(subtask.id)
            self.on_succeeded(subtask)
        return report

    def observe(self, subtask: PlannedSubtask) -> Report:
        if self.cancelled():
            return Report(False, "cancelled by the operator")
        location = subtask.target
        if self.config.observe_source != "perception":
            return Report(False, "no observation source on this robot (observe_source: none)")
        try:
            regions = self._named_locations()
        except CarryOnError as exc:
            return Report(False, f"observe: {exc}")
        if location not in regions:
            known = ", ".join(sorted(regions)) or "none"
            return Report(False, f"observe: unknown location {location!r} (named locations: {known})")
        looks, why, out_of_view = self._look_at(location, regions)
        if looks is None and out_of_view and self.config.observe_look and not self.cancelled():
            moved, how = self._look_motion(subtask)
            if not moved:
                return Report(False, f"observe: could not see {location}: {why}; the look motion failed: {how}")
            looks, why, _ = self._look_at(location, regions)
        if self.cancelled():
            return Report(False, "cancelled by the operator")
        if looks is None:  # most scenes could not see it: say why, as the latest did
            return Report(False, f"observe: could not see {location}: {why}")
        items = agree(looks)
        return Report(True, describe_look(location, items), {location: items})

    def _look_at(self, location: str, regions: dict[str, Location]) -> tuple[list[Any] | None, str, bool]:
        """What the next `observe_scenes` perception/scenes show at `location`: (the looks,
        or None when most scenes could not see it; why not, as the latest said; whether it
        was out of every camera's view)."""
        scenes = self._fresh_scenes(self.config.observe_scenes)
        if not scenes:
            return None, "no perception/scene since the request (is perception_node running?)", False
        looks, why, out_of_view = [], "", False
        for scene in scenes:
            if not scene.objects and scene.diagnostics:
                why, out_of_view = "; ".join(scene.diagnostics), False
            elif location in scene.out_of_view_locations:
                why, out_of_view = "no camera sees its region now (out of view or behind the arm)", True
            else:
                seen = [_seen(o) for o in scene.objects]
                planes = [p.label for p in scene.planes] or ["table"]
                min_size = self.config.observe_min_unidentified_m
                looks.append(visible_items(seen, location, regions, planes=planes, min_unidentified_m=min_size))
        return (None if len(looks) * 2 < len(scenes) else looks), why, out_of_view

    def _look_motion(self, subtask: PlannedSubtask) -> tuple[bool, str]:
        """recovery_node's `look` skill over the observed location (its target). The shield
        first gets this subtask with nothing exempt: the last subtask's target is an
        obstacle again."""
        try:
            self.plant.set_task(subtask.model_copy(update={"target": ""}))
        except DispatchError as exc:
            return False, str(exc)
        goal = Recover.Goal(subtask=planned_subtask_to_msg(subtask), skill=names.LOOK_SKILL, version=0)
        goal.failure_reason = f"no camera sees {subtask.target}"
        try:
            result = self.plant.run_recover(goal)
        except (DispatchError, Cancelled) as exc:
            return False, str(exc)
        return result.outcome == Recover.Result.OUTCOME_RESUME, result.message

    def _fresh_scenes(self, count: int) -> list[PerceivedScene]:
        """Up to `count` perception/scenes stamped after now (the previous motion has ended),
        each newer than the last, waiting at most `service_timeout_s` in all; fewer when no
        more came in time, none when the request was cancelled."""
        after = self.node.now_s()
        deadline = time.monotonic() + self.config.service_timeout_s
        scenes: list[PerceivedScene] = []
        while len(scenes) < count and time.monotonic() < deadline:
            if self.cancelled():
                return []
            with self.sensors.lock:
                scene = self.sensors.scene
            if scene is not None and (stamp := time_from_msg(scene.header.stamp)) > after:
                scenes.append(scene)
                after = stamp
                continue
            time.sleep(_POLL_S)
        return scenes

    def _named_locations(self) -> dict[str, Location]:
        """The planner's named locations (`locations_file`), read at the first observe."""
        if self._locations is None:
            self._locations = load_locations(locations_path(self.config.locations_file))
        return self._locations

    def say(self, subtask: PlannedSubtask) -> Report:
        if self.cancelled():
            return Report(False, "cancelled by the operator")
        self.said.append(subtask.objective)
        self.on_say(subtask.objective)
        return Report(True, "said")

    def control(self, subtask: PlannedSubtask) -> Report:
        return Report(False, f"no control skill {subtask.target or subtask.objective!r} on this robot")
