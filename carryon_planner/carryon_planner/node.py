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
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from geometry_msgs.msg import PoseStamped
from rclpy.action import ActionServer, CancelResponse, GoalResponse

from carryon_common.core import names
from carryon_common.core.errors import CarryOnError
from carryon_common.core.status import implemented
from carryon_common.node import CarryOnNode, ServiceUnavailable, latched_qos, run_node
from carryon_interfaces.action import Assist
from carryon_interfaces.msg import MemoryFact, PlanState, SceneUpdate, SimTruth, SubtaskState
from carryon_interfaces.srv import Ask, GetContext, UpdateScene, UpdateUser
from carryon_planner import convert
from carryon_planner.core.assist import AssistResult, assist
from carryon_planner.core.config import PlannerConfig
from carryon_planner.core.context import Endpoint, LibraryEntry, build_messages
from carryon_planner.core.executive import State, SubtaskRecord
from carryon_planner.core.facts import load_preference_rules, planning_facts, preferences_path
from carryon_planner.core.llm import LlmClient
from carryon_planner.core.plan import Plan, PlannedSubtask
from carryon_planner.core.plan import UpdateScene as PlannedSceneUpdate
from carryon_planner.core.plan import UpdateUser as PlannedUserUpdate
from carryon_planner.core.repair import PlanningOutcome, plan_with_repair
from carryon_planner.core.summarise import summarise
from carryon_planner.core.validator import Validator
from carryon_planner.llm_backends import make_llm
from carryon_planner.ros_dispatch import Cancelled, RosDispatch, Sensors
from carryon_policy.core.skills import SkillLibrary, load_skill_library, skills_path

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
_SCENE_ACTIONS = {
    "set_contents": SceneUpdate.OP_SET_CONTENTS,
    "move_item": SceneUpdate.OP_MOVE_ITEM,
    "remove_item": SceneUpdate.OP_REMOVE_ITEM,
}


_FINAL = {
    Assist.Result.STATUS_SUCCEEDED: PlanState.STATE_SUCCEEDED,
    Assist.Result.STATUS_REFUSED: PlanState.STATE_REFUSED,
    Assist.Result.STATUS_CANCELLED: PlanState.STATE_CANCELLED,
}


class _Context:
    """memory_node's context for one user: rendered memory, facts, scene."""

    def __init__(self, answer: GetContext.Response) -> None:
        self.rendered: str = answer.rendered
        self.facts: list[MemoryFact] = list(answer.user_facts)
        self.scene: dict[str, tuple[str, ...]] = {loc.name: tuple(loc.contents) for loc in answer.scene}


class _Refused(Exception):
    """The context could not be read: the request ends with this status and message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class PlannerNode(CarryOnNode):
    """`llm`: an injected client (tests); None builds the configured backend (a backend
    that cannot be built leaves the node up, answering Ask with STATUS_UNAVAILABLE)."""

    def __init__(self, llm: LlmClient | None = None, **node_kwargs: Any) -> None:
        super().__init__(names.PLANNER_NODE, PlannerConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: PlannerConfig = self.config
        self.library: SkillLibrary = load_skill_library(skills_path(cfg.skills_file))
        self.preferences = load_preference_rules(preferences_path(cfg.preferences_file))
        self.llm: LlmClient | None = llm
        self._llm_problem = ""
        if self.llm is None:
            try:
                self.llm = make_llm(cfg)
            except CarryOnError as exc:
                self._llm_problem = str(exc)
                self.get_logger().error(f"planning unavailable: {exc}")
        self.set_backends({"llm": self.llm.name if self.llm is not None else f"{cfg.llm_backend} (unavailable)"})
        if cfg.llm_backend == "scripted" and self.llm is not None:
            self.get_logger().warning(
                "planner LLM backend is SCRIPTED (NOT AN LLM): replies come from a script file; plans are still "
                "validated, repaired and executed for real. Set llm_backend: openai or local for a real planner."
            )
        self.validator = Validator()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.plan_state_pub = self.create_publisher(PlanState, names.PLAN_STATE, latched_qos())
        self.sensors = Sensors()
        self.create_subscription(PoseStamped, names.EE_POSE, self.sensors.keep_ee_pose, 10)
        if cfg.observe_source == "sim_truth":
            self.create_subscription(SimTruth, names.SIM_TRUTH, self.sensors.keep_truth, 10)
        self.create_service(Ask, names.ASK, self._on_ask, callback_group=self.service_group)
        self._busy = threading.Lock()
        self._assist = ActionServer(
            self, Assist, names.ASSIST, execute_callback=self._on_assist, goal_callback=self._accept_assist,
            cancel_callback=lambda _handle: CancelResponse.ACCEPT, callback_group=self.service_group,
        )  # fmt: skip
        self.set_ready()

    # -- planning (Ask and Assist) ----------------------------------------------------
    def _memory_context(self, user_id: str) -> _Context:
        cfg: PlannerConfig = self.config
        try:
            answer = self.call_service(
                GetContext, names.MEMORY_GET_CONTEXT, GetContext.Request(user_id=user_id), cfg.service_timeout_s
            )
        except ServiceUnavailable as exc:
            raise _Refused(Ask.Response.STATUS_UNAVAILABLE, f"memory: {exc}") from None
        if answer.status != GetContext.Response.STATUS_OK:
            raise _Refused(answer.status, f"memory: {answer.message}")
        return _Context(answer)

    def _plan(
        self, user_id: str, text: str, context: _Context, observations: Mapping[str, Sequence[str]] | None = None
    ) -> PlanningOutcome:
        cfg: PlannerConfig = self.config
        assert self.llm is not None
        seen = {loc: tuple(items) for loc, items in (observations or {}).items()}
        facts = planning_facts(
            request=text, scene=context.scene, library=self.library, user_facts=[f.value for f in context.facts],
            pending_observations=seen, preference_rules=self.preferences,
        )  # fmt: skip
        messages = build_messages(
            request=text,
            user_id=user_id,
            memory=context.rendered,
            endpoints=[Endpoint(name) for name in sorted(context.scene)],
            library=[LibraryEntry(s.instruction, s.description) for s in self.library.vla],
            observations=seen,
        )
        return plan_with_repair(self.llm, messages, facts, max_repairs=cfg.max_repairs, validator=self.validator)

    def _on_ask(self, request: Ask.Request, response: Ask.Response) -> Ask.Response:
        if self.llm is None:
            response.status = Ask.Response.STATUS_UNAVAILABLE
            response.message = self._llm_problem
            return response
        try:
            context = self._memory_context(request.user_id)
        except _Refused as exc:
            response.status, response.message = exc.status, exc.message
            return response
        outcome = self._plan(request.user_id, request.text, context)
        plan_id = f"p{next(self._ids)}"
        notes = [f"{len(outcome.attempts)} LLM round(s)"]
        if not outcome.refused and not request.plan_only:
            notes += self._apply_memory(request.user_id, outcome.plan, plan_id)
        state = self._plan_state(plan_id, request, outcome)
        if not outcome.refused:
            notes.append("plan only: nothing dispatched" if request.plan_only else
                         "not dispatched: Ask only plans (use the Assist action to carry it out)")  # fmt: skip
        state.message = "; ".join([state.message, *notes] if state.message else notes)
        self.plan_state_pub.publish(state)
        response.status = Ask.Response.STATUS_OK
        response.message = state.message
        response.reply = outcome.plan.reply
        response.plan = state
        return response

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
            return self._assist_goal(goal_handle, result)
        except Exception as exc:  # noqa: BLE001 - the request fails with the reason; the node stays up
            self.get_logger().error(f"Assist failed: {traceback.format_exc()}")
            result.status, result.message = Assist.Result.STATUS_FAILED, f"internal error: {exc!r} (see the log)"
            goal_handle.abort()
            return result
        finally:
            self._busy.release()

    def _assist_goal(self, goal_handle: Any, result: Assist.Result) -> Assist.Result:
        cfg: PlannerConfig = self.config
        request: Assist.Goal = goal_handle.request
        plan_id = f"p{next(self._ids)}"
        state = PlanState(plan_id=plan_id, request_id=plan_id, user_id=request.user_id, request=request.text)
        recovering: dict[str, str] = {}
        records: list[SubtaskRecord] = []
        lock = threading.Lock()

        def cancelled() -> bool:
            return bool(goal_handle.is_cancel_requested)

        def publish(code: int | None = None, message: str | None = None) -> None:
            with lock:
                if code is not None:
                    state.state = code
                if message is not None:
                    state.message = message
                state.header.stamp = self.get_clock().now().to_msg()
                state.subtasks = [self._subtask_state(r, recovering) for r in records]
                active = [r.subtask.id for r in records if r.state == State.ACTIVE]
                state.active_subtask_id = active[0] if active else ""
                snapshot = PlanState()
                for slot in PlanState.get_fields_and_field_types():
                    setattr(snapshot, slot, getattr(state, slot))
            self.plan_state_pub.publish(snapshot)
            goal_handle.publish_feedback(Assist.Feedback(plan=snapshot))

        def finish(status: int, message: str, reply: str = "") -> Assist.Result:
            final = _FINAL.get(status, PlanState.STATE_FAILED)
            publish(final, message)
            result.status, result.message, result.reply, result.plan = status, message, reply, state
            self.get_logger().info(f"{plan_id} ({request.user_id}: {request.text!r}) ended: {message}")
            if status == Assist.Result.STATUS_SUCCEEDED:
                goal_handle.succeed()
            elif status == Assist.Result.STATUS_CANCELLED:
                goal_handle.canceled()
            else:
                goal_handle.abort()
            return result

        if self.llm is None:
            return finish(Assist.Result.STATUS_FAILED, f"planning unavailable: {self._llm_problem}")
        self.get_logger().info(f"{plan_id}: {request.user_id} asks {request.text!r}")
        contexts: list[_Context] = []

        def plan(observations: Mapping[str, tuple[str, ...]]) -> PlanningOutcome:
            if cancelled():
                raise Cancelled("cancelled by the operator")
            publish(PlanState.STATE_PLANNING, "planning" + (" again with what was observed" if observations else ""))
            context = self._memory_context(request.user_id)
            contexts.append(context)
            outcome = self._plan(request.user_id, request.text, context, observations)
            with lock:
                state.reply = outcome.plan.reply
                state.plan_json = json.dumps(outcome.plan.model_dump(mode="json"), sort_keys=True)
                records[:] = [SubtaskRecord(s) for s in outcome.plan.subtasks]
            rounds = len(outcome.attempts)
            rejected = [f"LLM round {number} rejected: {attempt.rejected_because}"
                        for number, attempt in enumerate(outcome.attempts, 1) if attempt.rejected_because]  # fmt: skip
            for line in rejected:
                self.get_logger().info(f"{plan_id}: {line}")
            if rejected:
                publish(PlanState.STATE_VALIDATING, "validator: " + "; ".join(rejected))
            if outcome.refused:
                self.get_logger().info(f"{plan_id}: refused after {rounds} LLM round(s): {outcome.plan.refusal}")
            else:
                ids = ", ".join(f"{s.id} {s.kind} {s.instruction or s.target}" for s in outcome.plan.subtasks)
                self.get_logger().info(f"{plan_id}: valid plan after {rounds} LLM round(s): {ids or 'reply only'}")
            if cancelled():
                raise Cancelled("cancelled by the operator")
            return outcome

        def apply_memory(chosen: Plan) -> dict[str, tuple[str, ...]]:
            notes = self._apply_memory(request.user_id, chosen, plan_id, every_scene_update=True)
            if notes:
                self.get_logger().info(f"{plan_id}: " + "; ".join(notes))
            publish(PlanState.STATE_EXECUTING, "executing")
            return self._memory_context(request.user_id).scene

        def on_change(changed: Sequence[SubtaskRecord]) -> None:
            with lock:
                records[:] = list(changed)
            publish()

        def on_recovering(subtask_id: str, active: bool, why: str) -> None:
            with lock:
                if active:
                    recovering[subtask_id] = why
                else:
                    recovering.pop(subtask_id, None)
            publish()

        def on_say(text: str) -> None:
            self.get_logger().info(f"{plan_id} says: {text}")

        def on_succeeded(subtask: PlannedSubtask) -> None:
            scene = contexts[-1].scene if contexts else {}
            note = self._record_move(subtask, scene, plan_id)
            if note:
                self.get_logger().info(f"{plan_id}: {subtask.id}: {note}")

        dispatch = RosDispatch(self, cfg, self.sensors, cancelled=cancelled, on_say=on_say,
                               on_recovering=on_recovering, on_succeeded=on_succeeded)  # fmt: skip
        try:
            outcome = assist(plan, apply_memory, dispatch, max_replans=cfg.max_replans, on_change=on_change)
        except Cancelled as exc:
            return finish(Assist.Result.STATUS_CANCELLED, str(exc), state.reply)
        except _Refused as exc:
            return finish(Assist.Result.STATUS_FAILED, exc.message, state.reply)
        if cancelled():
            why = f"cancelled by the operator ({outcome.message})"
            return finish(Assist.Result.STATUS_CANCELLED, why, outcome.reply)
        if outcome.refused:
            return finish(Assist.Result.STATUS_REFUSED, outcome.message, outcome.reply)
        summary = self._summarise(request.user_id, request.text, outcome, contexts[-1], plan_id) if contexts else ""
        message = outcome.message + (f"; {summary}" if summary else "")
        status = Assist.Result.STATUS_SUCCEEDED if outcome.succeeded else Assist.Result.STATUS_FAILED
        return finish(status, message, outcome.reply)

    def _record_move(self, subtask: PlannedSubtask, scene: Mapping[str, tuple[str, ...]], plan_id: str) -> str:
        """After a judged success, where the target is now: at the destination location, or
        "target in destination" at the location holding the destination (scene memory)."""
        if not (subtask.target and subtask.destination):
            return ""
        if subtask.destination in scene:
            location, item = subtask.destination, subtask.target
        else:
            holds = [subtask.destination]
            holders = [loc for loc, items in scene.items() if any(i.split()[:1] == holds for i in items)]
            if len(holders) != 1:
                return f"scene memory not updated: no one location holds {subtask.destination}"
            location, item = holders[0], f"{subtask.target} in {subtask.destination}"
        source = f"executive:{plan_id}"
        update = SceneUpdate(op=SceneUpdate.OP_MOVE_ITEM, location=location, item=item, source=source)
        return self._memory_call(UpdateScene, names.MEMORY_UPDATE_SCENE, UpdateScene.Request(updates=[update]),
                                 self.config.service_timeout_s)  # fmt: skip

    @staticmethod
    def _subtask_state(record: SubtaskRecord, recovering: Mapping[str, str]) -> SubtaskState:
        msg = convert.planned_subtask_to_state(record.subtask)
        if record.state == State.ACTIVE and record.subtask.id in recovering:
            msg.state, msg.message = SubtaskState.STATE_RECOVERING, recovering[record.subtask.id]
        else:
            msg.state, msg.message = int(record.state), record.message  # State mirrors SubtaskState
        msg.attempts = record.attempts
        return msg

    def _summarise(self, user_id: str, text: str, outcome: AssistResult, context: _Context, plan_id: str) -> str:
        """The summariser (paper §B.2) after a finished plan: lasting facts, checked, stored."""
        cfg: PlannerConfig = self.config
        if not cfg.summarise or self.llm is None or not outcome.rounds:
            return ""
        plan = outcome.rounds[-1].outcome.plan
        stored = [(f.entity, f.key, f.value) for f in context.facts]
        summary = summarise(self.llm, user_id=user_id, request=text, plan=plan, stored=stored)
        if summary.problem:
            self.get_logger().warning(f"{plan_id}: summariser: {summary.problem}")
            return f"summariser: {summary.problem}"
        if not summary.store:
            return "summariser: nothing lasting to remember"
        source = f"summariser:{plan_id}"
        facts = [MemoryFact(entity=op.entity, key=op.key, value=op.value, durable=True, source=source)
                 for op in summary.store]  # fmt: skip
        request = UpdateUser.Request(user_id=user_id, facts=facts, source=source)
        note = self._memory_call(UpdateUser, names.MEMORY_UPDATE_USER, request, cfg.service_timeout_s)
        remembered = ", ".join(f"{op.entity} {op.key}: {op.value}" for op in summary.store)
        return f"summariser remembered {remembered} ({note})"

    def _plan_state(self, plan_id: str, request: Ask.Request, outcome: PlanningOutcome) -> PlanState:
        plan = outcome.plan
        state = PlanState(plan_id=plan_id, request_id=plan_id, user_id=request.user_id, request=request.text)
        state.header.stamp = self.get_clock().now().to_msg()
        state.reply = plan.reply
        state.plan_json = json.dumps(plan.model_dump(mode="json"), sort_keys=True)
        if outcome.refused:
            state.state = PlanState.STATE_REFUSED
            state.message = plan.refusal or "refused"
        else:
            state.state = PlanState.STATE_VALIDATING
            state.subtasks = [convert.planned_subtask_to_state(s) for s in plan.subtasks]
        return state

    def _apply_memory(self, user_id: str, plan: Plan, plan_id: str, *, every_scene_update: bool = False) -> list[str]:
        """Durable user facts and scene updates written now: those not tied to a later
        subtask (Ask), or every one (Assist: before the first subtask runs)."""
        cfg: PlannerConfig = self.config
        notes: list[str] = []
        source = f"planner:{plan_id}"
        durable = [op for op in plan.memory_operations if isinstance(op, PlannedUserUpdate) and op.durable]
        if durable:
            facts = [MemoryFact(entity=op.entity, key=op.key, value=op.value, durable=True, source=source)
                     for op in durable]  # fmt: skip
            request = UpdateUser.Request(user_id=user_id, facts=facts, source=source)
            notes.append(self._memory_call(UpdateUser, names.MEMORY_UPDATE_USER, request, cfg.service_timeout_s))
        scene_ops = [op for op in plan.memory_operations if isinstance(op, PlannedSceneUpdate)
                     and (every_scene_update or op.before_subtask is None)]  # fmt: skip
        if scene_ops:
            updates = [SceneUpdate(op=_SCENE_ACTIONS[op.action], location=op.location, contents=list(op.contents),
                                   item=op.item, source=source) for op in scene_ops]  # fmt: skip
            scene_request = UpdateScene.Request(updates=updates)
            notes.append(
                self._memory_call(UpdateScene, names.MEMORY_UPDATE_SCENE, scene_request, cfg.service_timeout_s)
            )
        return notes

    def _memory_call(self, srv: Any, name: str, request: Any, timeout_s: float) -> str:
        try:
            answer = self.call_service(srv, name, request, timeout_s)
        except ServiceUnavailable as exc:
            return f"memory not updated: {exc}"
        return (
            "memory: " + answer.message
            if answer.status == srv.Response.STATUS_OK
            else f"memory refused: {answer.message}"
        )


def main() -> int:
    return run_node(PlannerNode)
