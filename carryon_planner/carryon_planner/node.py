"""planner_node: turns operator/user requests into validated plans (and, with the
executive, runs them).

Ask: the active user's memory and scene memory from memory_node (GetContext), the skill
library and the endpoints go to the LLM; its plan is validated, handed back for repair
up to `max_repairs` times, else refused safely. An invalid plan is never dispatched.
With `plan_only` nothing changes anywhere; otherwise the plan's durable user facts and
immediate scene updates are written to memory. Dispatching subtasks (the executive) is
not implemented yet: the answer says so.
"""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

from carryon_common.core import names
from carryon_common.core.errors import CarryOnError
from carryon_common.core.status import implemented, planned
from carryon_common.node import CarryOnNode, ServiceUnavailable, latched_qos, run_node
from carryon_interfaces.action import Assist
from carryon_interfaces.msg import MemoryFact, PlanState, SceneUpdate
from carryon_interfaces.srv import Ask, GetContext, UpdateScene, UpdateUser
from carryon_planner import convert
from carryon_planner.core.config import PlannerConfig
from carryon_planner.core.context import Endpoint, LibraryEntry, build_messages
from carryon_planner.core.facts import load_preference_rules, planning_facts, preferences_path
from carryon_planner.core.llm import LlmClient
from carryon_planner.core.plan import Plan
from carryon_planner.core.plan import UpdateScene as PlannedSceneUpdate
from carryon_planner.core.plan import UpdateUser as PlannedUserUpdate
from carryon_planner.core.repair import PlanningOutcome, plan_with_repair
from carryon_planner.core.validator import Validator
from carryon_planner.llm_backends import make_llm
from carryon_policy.core.skills import SkillLibrary, load_skill_library, skills_path

CAPABILITIES = (
    implemented("planner.ask", "plan a request with the user's memory, validate and repair it (Ask)"),
    planned("planner.assist", 8, "dispatch and supervise subtasks with shield, judge and recovery (executive)"),
    implemented("planner.llm.openai", "any OpenAI-compatible endpoint (llm_backend: openai)"),
    implemented(
        "planner.llm.local",
        "offline Qwen2.5-Coder-0.5B via llama.cpp (llm_backend: local; opt-in scripts/setup_llm.sh; weak plans)",
    ),
    implemented("planner.validator", "named validation checks and the repair loop"),
)
_SCENE_ACTIONS = {
    "set_contents": SceneUpdate.OP_SET_CONTENTS,
    "move_item": SceneUpdate.OP_MOVE_ITEM,
    "remove_item": SceneUpdate.OP_REMOVE_ITEM,
}


def _assist_not_implemented(result: Assist.Result, message: str) -> None:
    result.status = Assist.Result.STATUS_NOT_IMPLEMENTED
    result.message = message


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
        self.validator = Validator()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.plan_state_pub = self.create_publisher(PlanState, names.PLAN_STATE, latched_qos())
        self.create_service(Ask, names.ASK, self._on_ask, callback_group=self.service_group)
        self._assist = self.action_not_implemented(Assist, names.ASSIST, "planner.assist", _assist_not_implemented)
        self.set_ready()

    def _on_ask(self, request: Ask.Request, response: Ask.Response) -> Ask.Response:
        cfg: PlannerConfig = self.config
        if self.llm is None:
            response.status = Ask.Response.STATUS_UNAVAILABLE
            response.message = self._llm_problem
            return response
        try:
            context = self.call_service(
                GetContext, names.MEMORY_GET_CONTEXT, GetContext.Request(user_id=request.user_id), cfg.service_timeout_s
            )
        except ServiceUnavailable as exc:
            response.status, response.message = Ask.Response.STATUS_UNAVAILABLE, f"memory: {exc}"
            return response
        if context.status != GetContext.Response.STATUS_OK:
            response.status, response.message = context.status, f"memory: {context.message}"
            return response
        scene = {loc.name: tuple(loc.contents) for loc in context.scene}
        facts = planning_facts(
            request=request.text, scene=scene, library=self.library, user_facts=[f.value for f in context.user_facts],
            preference_rules=self.preferences,
        )  # fmt: skip
        messages = build_messages(
            request=request.text,
            user_id=request.user_id,
            memory=context.rendered,
            endpoints=[Endpoint(name) for name in sorted(scene)],
            library=[LibraryEntry(s.instruction, s.description) for s in self.library.vla],
        )
        outcome = plan_with_repair(self.llm, messages, facts, max_repairs=cfg.max_repairs, validator=self.validator)
        plan_id = f"p{next(self._ids)}"
        notes = [f"{len(outcome.attempts)} LLM round(s)"]
        if not outcome.refused and not request.plan_only:
            notes += self._apply_memory(request.user_id, outcome.plan, plan_id)
        state = self._plan_state(plan_id, request, outcome)
        if not outcome.refused:
            notes.append("plan only: nothing dispatched" if request.plan_only else
                         "not dispatched: the executive is not implemented yet (issue 8)")  # fmt: skip
        state.message = "; ".join([state.message, *notes] if state.message else notes)
        self.plan_state_pub.publish(state)
        response.status = Ask.Response.STATUS_OK
        response.message = state.message
        response.reply = outcome.plan.reply
        response.plan = state
        return response

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

    def _apply_memory(self, user_id: str, plan: Plan, plan_id: str) -> list[str]:
        """Durable user facts and scene updates not tied to a later subtask, written now."""
        cfg: PlannerConfig = self.config
        notes: list[str] = []
        source = f"planner:{plan_id}"
        durable = [op for op in plan.memory_operations if isinstance(op, PlannedUserUpdate) and op.durable]
        if durable:
            facts = [MemoryFact(entity=op.entity, key=op.key, value=op.value, durable=True, source=source)
                     for op in durable]  # fmt: skip
            request = UpdateUser.Request(user_id=user_id, facts=facts, source=source)
            notes.append(self._memory_call(UpdateUser, names.MEMORY_UPDATE_USER, request, cfg.service_timeout_s))
        scene_ops = [op for op in plan.memory_operations
                     if isinstance(op, PlannedSceneUpdate) and op.before_subtask is None]  # fmt: skip
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
