"""planner_node: turns operator/user requests into validated plans and runs them.

Planning (Ask and Assist): the active user's memory and scene memory from memory_node
(GetContext), the skill library and the endpoints go to the LLM; its plan is validated,
handed back for repair up to `max_repairs` times, else refused safely. An invalid plan is
never dispatched.

* Ask (consoles): plan only. With `plan_only` nothing changes anywhere; otherwise the
  plan's durable user facts and immediate scene updates are written to memory. Nothing
  moves.
* Assist (action): plan, write the plan's memory operations, run the plan with the
  executive (core/executive.py) over the graph (ros_dispatch.py: shield SetTask,
  RunPolicy, the judge's verdicts, Recover), replan when an observation contradicts scene
  memory, and finally let the summariser store lasting facts. Feedback: the PlanState
  (also on planner/plan_state, which the judge's monitor follows) at every change.
  Cancel: the running policy / recovery goal is cancelled (the arm holds), nothing else
  starts. One Assist runs at a time; another is rejected.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from geometry_msgs.msg import PoseStamped
from rclpy.action import ActionServer, CancelResponse, GoalResponse

from carryon_common.core import names
from carryon_common.core.errors import CarryOnError
from carryon_common.core.llm import LlmClient, LlmError
from carryon_common.core.llm_backends import make_llm
from carryon_common.core.openai_client import OpenAiClient
from carryon_common.core.skills import load_skill_library, skills_path
from carryon_common.core.status import implemented
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import qos_for
from carryon_common.request_auth import Unauthorized, sign_decision
from carryon_interfaces.action import Assist, Recover, RunPolicy
from carryon_interfaces.msg import PerceivedScene, PlanState, SubtaskState
from carryon_interfaces.srv import Ask
from carryon_planner import convert
from carryon_planner.core.config import TEXT_ONLY_BACKENDS, PlannerConfig
from carryon_planner.core.context import warm_up_messages
from carryon_planner.core.executive import Dispatch, State, SubtaskRecord
from carryon_planner.core.facts import food_knowledge_path, load_preference_rules, preferences_path
from carryon_planner.core.knowledge import load_food_knowledge
from carryon_planner.core.learned_kinds import LearnedKinds
from carryon_planner.core.memory_ops import ContextUnavailable, Memory
from carryon_planner.core.repair import PlanningOutcome
from carryon_planner.core.request_planner import RequestPlanner
from carryon_planner.core.session import AssistSession, DispatchHooks, Progress, Status, ask
from carryon_planner.ros_dispatch import RosDispatch, Sensors
from carryon_planner.ros_memory import RosMemory

WARM_UP_WAIT_S = 600.0  # the model server loads the model (and assembles it on a first run)

CAPABILITIES = (
    implemented("planner.ask", "plan a request with the user's memory, validate and repair it (Ask)"),
    implemented("planner.assist", "plan, then run the subtasks with shield, judge and recovery; replan; summarise"),
    implemented("planner.llm.openai", "any OpenAI-compatible endpoint (llm_backend: openai)"),
    implemented("planner.llm.scripted", "NOT AN LLM: scripted replies for the demo (llm_backend: scripted)"),
    implemented(
        "planner.llm.local",
        "offline Qwen2.5-Coder-1.5B / 0.5B via llama.cpp (llm_backend: local; opt-in scripts/setup_llm.sh; weak plans)",
    ),
    implemented("planner.validator", "named validation checks and the repair loop"),
)
# Builds the dispatcher of one Assist request: (cancelled, the session's hooks) -> Dispatch.
DispatchFactory = Callable[[Callable[[], bool], DispatchHooks], Dispatch]


class PlannerNode(CarryOnNode):
    """Backends are injected; None builds the configured one. `llm`: the planner's LLM (a
    backend that cannot be built leaves the node up, answering Ask with STATUS_UNAVAILABLE).
    `memory`: memory_node (default: its services). `make_dispatch`: the executive's
    dispatcher per Assist request (default: RosDispatch over the graph)."""

    def __init__(
        self,
        llm: LlmClient | None = None,
        *,
        memory: Memory | None = None,
        make_dispatch: DispatchFactory | None = None,
        **node_kwargs: Any,
    ) -> None:
        super().__init__(names.PLANNER_NODE, PlannerConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: PlannerConfig = self.config
        library = load_skill_library(skills_path(cfg.skills_file))
        preferences = load_preference_rules(preferences_path(cfg.preferences_file))
        knowledge = load_food_knowledge(food_knowledge_path(cfg.food_knowledge_file))
        self._llm_problem = ""
        if llm is None:
            try:
                llm = make_llm(cfg)
            except CarryOnError as exc:
                self._llm_problem = str(exc)
                self.get_logger().error(f"planning unavailable: {exc}")
        learned = None
        if cfg.classify_unknown_names:
            learned = LearnedKinds(Path(cfg.learned_kinds_file) if cfg.learned_kinds_file else None)
            for problem in learned.problems:
                self.get_logger().warning(problem)
        # Reference images go to an image-capable endpoint only; the local model reads their descriptions.
        images = cfg.llm_images and cfg.llm_backend not in TEXT_ONLY_BACKENDS
        if cfg.llm_images and not images:
            self.get_logger().warning(f"llm_images: {cfg.llm_backend} is text-only; images are described instead")
        self.planner = (
            RequestPlanner(
                llm,
                library,
                preferences,
                max_repairs=cfg.max_repairs,
                learned=learned,
                knowledge=knowledge,
                images=images,
                steps=cfg.plans_in_steps,
            )
            if llm is not None
            else None
        )
        self.set_backends({"llm": llm.name if llm is not None else f"{cfg.llm_backend} (unavailable)"})
        if cfg.llm_backend == "local" and isinstance(llm, OpenAiClient):
            threading.Thread(target=self._warm_up, args=(llm,), name="llm_warm_up", daemon=True).start()
        if cfg.llm_backend == "scripted" and llm is not None:
            self.get_logger().warning(
                "planner LLM backend is SCRIPTED (NOT AN LLM): replies come from a script file; plans are still "
                "validated, repaired and executed for real. Set llm_backend: openai or local for a real planner."
            )
        # Who may ask (operators_file: self.requests, CarryOnNode), each for the users its line grants.
        assert self.requests is not None
        self.memory: Memory = memory if memory is not None else RosMemory(self, cfg.service_timeout_s, images)
        self._make_dispatch = make_dispatch or self._ros_dispatch
        self._ids = itertools.count(1)
        self.plan_state_pub = self.create_publisher(PlanState, names.PLAN_STATE, qos_for(names.PLAN_STATE))
        self.sensors = Sensors()
        self.create_subscription(PoseStamped, names.EE_POSE, self.sensors.keep_ee_pose, qos_for(names.EE_POSE))
        if cfg.observe_source == "perception":
            self.create_subscription(
                PerceivedScene, names.PERCEPTION_SCENE, self.sensors.keep_scene, qos_for(names.PERCEPTION_SCENE)
            )
        self.create_service(Ask, names.ASK, self._on_ask, callback_group=self.service_group)
        for action_type, action in ((RunPolicy, names.RUN_POLICY), (Recover, names.RECOVER)):
            self.action_client(action_type, action)  # discovered while the node starts
        self._busy = threading.Lock()
        self._assist = ActionServer(
            self,
            Assist,
            names.ASSIST,
            execute_callback=self._on_assist,
            goal_callback=self._accept_assist,
            cancel_callback=lambda _handle: CancelResponse.ACCEPT,
            callback_group=self.service_group,
        )
        self.set_ready()

    def _warm_up(self, llm: OpenAiClient) -> None:
        """Have the local model server read the plan requests' rules and schema once, as soon
        as it answers (it loads beside this node), so the first request re-uses them."""
        started, messages = time.monotonic(), warm_up_messages(self.config.plans_in_steps)
        while self.context.ok() and time.monotonic() - started < WARM_UP_WAIT_S:
            try:
                llm.warm_up(messages, timeout_s=WARM_UP_WAIT_S)
            except LlmError:
                time.sleep(2.0)  # the server is still loading the model
                continue
            self.get_logger().info(f"model server warmed with the planner's rules and schema ({llm.base_url})")
            return

    def _ros_dispatch(self, cancelled: Callable[[], bool], hooks: DispatchHooks) -> Dispatch:
        return RosDispatch(
            self,
            self.config,
            self.sensors,
            cancelled=cancelled,
            on_say=hooks.on_say,
            on_recovering=hooks.on_recovering,
            on_succeeded=hooks.on_succeeded,
        )

    def _new_plan_id(self) -> str:
        return f"p{next(self._ids)}"

    # -- Ask -------------------------------------------------------------------------
    def _on_ask(self, request: Ask.Request, response: Ask.Response) -> Ask.Response:
        if self.planner is None:
            response.status = Ask.Response.STATUS_UNAVAILABLE
            response.message = self._llm_problem
            return response
        try:  # even plan_only: a plan reads the user's memory
            self.requests.principal(request, ("operator:",), user=request.user_id)
        except Unauthorized as exc:
            response.status, response.message = Ask.Response.STATUS_UNAUTHORIZED, f"refused: {exc}"
            return response
        try:
            answer = ask(
                self.planner,
                self.memory,
                user_id=request.user_id,
                text=request.text,
                new_plan_id=self._new_plan_id,
                plan_only=request.plan_only,
            )
        except ContextUnavailable as exc:
            response.status, response.message = exc.status, exc.message
            return response
        state = self._plan_state(answer.plan_id, request, answer.outcome)
        notes = list(answer.notes)
        state.message = "; ".join([state.message, *notes] if state.message else notes)
        self.plan_state_pub.publish(sign_decision(self.identity, state, names.PLAN_STATE))
        response.status = Ask.Response.STATUS_OK
        response.message = state.message
        response.reply = answer.outcome.plan.reply
        response.plan = state
        return response

    def _plan_state(self, plan_id: str, request: Ask.Request, outcome: PlanningOutcome) -> PlanState:
        plan = outcome.plan
        state = PlanState(plan_id=plan_id, request_id=plan_id, user_id=request.user_id, request=request.text)
        state.header.stamp = self.stamp_now()
        state.reply = plan.reply
        state.plan_json = json.dumps(plan.model_dump(mode="json"), sort_keys=True)
        if outcome.refused:
            state.state = PlanState.STATE_REFUSED
            state.message = plan.refusal or "refused"
        else:
            state.state = PlanState.STATE_VALIDATING
            state.subtasks = [convert.planned_subtask_to_state(s) for s in plan.subtasks]
        return state

    # -- Assist ----------------------------------------------------------------------
    def _accept_assist(self, _goal: Assist.Goal) -> GoalResponse:
        if self._busy.locked():
            self.get_logger().warning("Assist rejected: another request is being carried out")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _on_assist(self, goal_handle: Any) -> Assist.Result:
        result = Assist.Result()
        if not self._busy.acquire(blocking=False):
            result.status, result.message = Assist.Result.STATUS_FAILED, "another request is being carried out"
            goal_handle.abort()
            return result
        try:
            operator = self.requests.principal(goal_handle.request, ("operator:",), user=goal_handle.request.user_id)
        except Unauthorized as exc:
            self.get_logger().warning(f"Assist refused: {exc}")
            result.status, result.message = Assist.Result.STATUS_FAILED, f"refused: {exc}"
            goal_handle.abort()
            self._busy.release()
            return result
        if operator:
            self.get_logger().info(f"Assist requested by {operator}")
        try:
            return self._assist_goal(goal_handle, result)
        except Exception as exc:  # noqa: BLE001 - the request fails with the reason; the node stays up
            if not self.context.ok():  # Ctrl-C / SIGTERM mid-request: the goal ends with the node, no handle left
                print(f"planner_node: Assist {goal_handle.request.text!r} ended by the shutdown ({exc!r})", flush=True)
                result.status, result.message = Assist.Result.STATUS_CANCELLED, "the planner shut down"
                return result
            self.get_logger().error(f"Assist failed: {traceback.format_exc()}")
            result.status, result.message = Assist.Result.STATUS_FAILED, f"internal error: {exc!r} (see the log)"
            goal_handle.abort()
            return result
        finally:
            self._busy.release()

    def _assist_goal(self, goal_handle: Any, result: Assist.Result) -> Assist.Result:
        """Map one Assist goal onto an AssistSession: progress -> PlanState + feedback."""
        cfg: PlannerConfig = self.config
        request: Assist.Goal = goal_handle.request
        plan_id = self._new_plan_id()
        published: list[PlanState] = []

        def cancelled() -> bool:
            return bool(goal_handle.is_cancel_requested)

        def publish(progress: Progress) -> None:
            state = self._progress_msg(progress, plan_id, request)
            published[:] = [state]
            self.plan_state_pub.publish(sign_decision(self.identity, state, names.PLAN_STATE))
            goal_handle.publish_feedback(Assist.Feedback(plan=state))

        session = AssistSession(
            planner=self.planner,
            memory=self.memory,
            make_dispatch=lambda hooks: self._make_dispatch(cancelled, hooks),
            plan_id=plan_id,
            user_id=request.user_id,
            text=request.text,
            max_replans=cfg.max_replans,
            summarise=cfg.summarise,
            cancelled=cancelled,
            publish=publish,
            log=self.get_logger().info,
            warn=self.get_logger().warning,
            unavailable=self._llm_problem,
        )
        outcome = session.run()
        result.status, result.message, result.reply = int(outcome.status), outcome.message, outcome.reply
        result.plan = published[-1]  # the final PlanState, as published
        if outcome.status == Status.SUCCEEDED:
            goal_handle.succeed()
        elif outcome.status == Status.CANCELLED:
            goal_handle.canceled()
        else:
            goal_handle.abort()
        return result

    def _progress_msg(self, progress: Progress, plan_id: str, request: Assist.Goal) -> PlanState:
        state = PlanState(plan_id=plan_id, request_id=plan_id, user_id=request.user_id, request=request.text)
        state.header.stamp = self.stamp_now()
        state.state, state.message = int(progress.phase), progress.message
        state.reply, state.plan_json = progress.reply, progress.plan_json
        state.subtasks = [self._subtask_state(r, progress.recovering) for r in progress.records]
        state.active_subtask_id = progress.active_subtask_id
        return state

    @staticmethod
    def _subtask_state(record: SubtaskRecord, recovering: Mapping[str, str]) -> SubtaskState:
        msg = convert.planned_subtask_to_state(record.subtask)
        if record.state == State.ACTIVE and record.subtask.id in recovering:
            msg.state, msg.message = SubtaskState.STATE_RECOVERING, recovering[record.subtask.id]
        else:
            msg.state, msg.message = int(record.state), record.message  # State mirrors SubtaskState
        msg.attempts = record.attempts
        return msg


def main() -> int:
    return run_node(PlannerNode)
