"""The planner's request logic without ROS (core/session.py, core/memory_ops.py): what Ask
and Assist write to memory and when, the progress an Assist publishes, where a moved
target is recorded, the summariser's facts, and how cancel / refusal / an unreachable
memory end a request. Memory, LLM and dispatcher are in-memory fakes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from carryon_common.core.llm import ChatMessage
from carryon_common.core.skills import load_skill_library, skills_path
from carryon_planner.core.executive import Dispatch, Report
from carryon_planner.core.memory_ops import (
    ContextUnavailable,
    FactWrite,
    MemoryContext,
    SceneWrite,
    StoredFact,
    move_after_success,
    plan_writes,
)
from carryon_planner.core.plan import Plan, PlannedSubtask
from carryon_planner.core.request_planner import RequestPlanner
from carryon_planner.core.session import (
    AssistSession,
    DispatchHooks,
    Phase,
    Progress,
    SessionResult,
    Status,
    ask,
)
from carryon_planner.core.taxonomy import Taxonomy

SCENE = {"kitchen_counter": ("pink_cover", "carrot", "plate"), "dining_table": ("bowl",)}
LOOK = {"id": "s0", "kind": "observe", "objective": "see the counter", "target": "kitchen_counter"}
CARROT = {
    "id": "s1",
    "kind": "vla",
    "objective": "carrot in bowl",
    "instruction": "put the carrot in the bowl",
    "target": "carrot",
    "destination": "bowl",
    "depends_on": ["s0"],  # scene memory says where to look, not what is there now
}
TELL = {"id": "s2", "kind": "say", "objective": "Enjoy!", "depends_on": ["s1"]}
RYE = {"op": "update_user", "entity": "bread", "key": "preference", "value": "rye", "durable": True}
TEA = {"op": "update_user", "entity": "drink", "key": "wish", "value": "tea", "durable": False}
NOW = {"op": "update_scene", "action": "set_contents", "location": "dining_table", "contents": ["bowl", "cup"]}
LATER = {**NOW, "action": "remove_item", "item": "cup", "contents": [], "before_subtask": "s1"}
SERVE = {"reply": "Here is your carrot.", "subtasks": [LOOK, CARROT, TELL], "memory_operations": [RYE, TEA, NOW, LATER]}
NOTHING = json.dumps({"remember": []})


@dataclass
class FakeLlm:
    """Answers plans and summaries in order; records the conversations."""

    replies: list[str]
    seen: list[list[ChatMessage]] = field(default_factory=list)
    name: str = "fake"

    def complete(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> str:
        self.seen.append(list(messages))
        return self.replies.pop(0)


@dataclass
class FakeMemory:
    """Scene and facts in memory; every write recorded as (kind, payload, source)."""

    scene: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(SCENE))
    facts: tuple[StoredFact, ...] = (StoredFact("diet", "preference", "vegetarian"),)
    down: bool = False
    writes: list[tuple[str, tuple[Any, ...], str]] = field(default_factory=list)

    def context(self, user_id: str) -> MemoryContext:
        if self.down:
            raise ContextUnavailable(3, "memory: memory/get_context not available")
        return MemoryContext(f"memory of {user_id}", self.facts, dict(self.scene))

    def update_user(self, user_id: str, facts: Sequence[FactWrite], source: str) -> str:
        self.writes.append(("user", tuple(facts), source))
        return "memory: stored"

    def update_scene(self, updates: Sequence[SceneWrite], source: str) -> str:
        self.writes.append(("scene", tuple(updates), source))
        return "memory: scene updated"


@dataclass
class FakeDispatch:
    """Every subtask succeeds; hands successes and sentences to the session's hooks."""

    hooks: DispatchHooks
    calls: list[str] = field(default_factory=list)

    def run_vla(self, subtask: PlannedSubtask, permitted: tuple[str, ...] = ()) -> Report:
        self.calls.append(subtask.id)
        self.hooks.on_recovering(subtask.id, True, "dropped it")
        self.hooks.on_recovering(subtask.id, False, "")
        self.hooks.on_succeeded(subtask)
        return Report(True, "judge: success")

    def observe(self, subtask: PlannedSubtask) -> Report:  # sees what memory holds there
        return Report(True, "looked", {subtask.target: SCENE.get(subtask.target, ())})

    def say(self, subtask: PlannedSubtask) -> Report:
        self.hooks.on_say(subtask.objective)
        return Report(True, "said")

    def control(self, subtask: PlannedSubtask) -> Report:
        return Report(False, "no control skills")


def planner(replies: list[str]) -> RequestPlanner:
    library = load_skill_library(skills_path())
    return RequestPlanner(
        FakeLlm(replies), library, Taxonomy(kinds={"meat": ("meat",)}, diets={"vegetarian": ("meat",)}), max_repairs=1
    )


@dataclass
class Run:
    memory: FakeMemory = field(default_factory=FakeMemory)
    progress: list[Progress] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    dispatches: list[FakeDispatch] = field(default_factory=list)
    cancel: bool = False

    def make_dispatch(self, hooks: DispatchHooks) -> Dispatch:
        self.dispatches.append(FakeDispatch(hooks))
        return self.dispatches[-1]

    def assist(self, replies: list[str] | None, *, summarise: bool = True) -> SessionResult:
        session = AssistSession(
            planner=planner(replies) if replies is not None else None,
            memory=self.memory,
            make_dispatch=self.make_dispatch,
            plan_id="p7",
            user_id="alice",
            text="serve me a carrot",
            max_replans=1,
            summarise=summarise,
            cancelled=lambda: self.cancel,
            publish=self.progress.append,
            log=self.log.append,
            warn=self.log.append,
            unavailable="no model",
        )
        return session.run()


def test_plan_writes_keep_durable_facts_and_the_scene_updates_due_now() -> None:
    plan = Plan.model_validate(SERVE)
    facts, scene = plan_writes(plan, every_scene_update=False)
    assert facts == [FactWrite("bread", "preference", "rye")]  # the one-off wish is never written
    assert scene == [SceneWrite("set_contents", "dining_table", ("bowl", "cup"))]
    _facts, every = plan_writes(plan, every_scene_update=True)
    assert every[1] == SceneWrite("remove_item", "dining_table", item="cup")


def test_ask_writes_the_plan_memory_unless_plan_only() -> None:
    memory, ids = FakeMemory(), iter(["p1", "p2"])
    answer = ask(
        planner([json.dumps(SERVE)]),
        memory,
        user_id="alice",
        text="serve me",
        new_plan_id=lambda: next(ids),
        plan_only=False,
    )
    assert answer.plan_id == "p1" and not answer.outcome.refused
    assert [(kind, source) for kind, _payload, source in memory.writes] == [
        ("user", "planner:p1"),
        ("scene", "planner:p1"),
    ]
    assert answer.notes == (
        "1 LLM round(s)",
        "memory: stored",
        "memory: scene updated",
        "not dispatched: Ask only plans (use the Assist action to carry it out)",
    )
    memory.writes.clear()
    answer = ask(
        planner([json.dumps(SERVE)]),
        memory,
        user_id="alice",
        text="serve me",
        new_plan_id=lambda: next(ids),
        plan_only=True,
    )
    assert memory.writes == [] and answer.notes[-1] == "plan only: nothing dispatched"


def test_ask_without_memory_takes_no_plan_id() -> None:
    taken: list[str] = []
    with pytest.raises(ContextUnavailable, match="not available") as raised:
        ask(
            planner([]),
            FakeMemory(down=True),
            user_id="alice",
            text="x",
            new_plan_id=lambda: taken.append("p") or "p",
            plan_only=False,
        )
    assert raised.value.status == 3 and taken == []


def test_assist_plans_writes_runs_records_the_move_and_summarises() -> None:
    run = Run()
    remember = json.dumps({"remember": [{"entity": "snack", "key": "favourite", "value": "carrot"}]})
    result = run.assist([json.dumps(SERVE), remember])
    assert result.status == Status.SUCCEEDED and result.reply == "Here is your carrot."
    assert result.message.endswith("summariser remembered snack favourite: carrot (memory: stored)")
    user, scene, moved, summary = run.memory.writes
    assert user == ("user", (FactWrite("bread", "preference", "rye"),), "planner:p7")
    assert len(scene[1]) == 2 and scene[2] == "planner:p7"  # every scene update, before the first subtask
    assert moved == ("scene", (SceneWrite("move_item", "dining_table", item="carrot in bowl"),), "executive:p7")
    assert summary == ("user", (FactWrite("snack", "favourite", "carrot"),), "summariser:p7")
    phases = [p.phase for p in run.progress]
    assert phases[0] == Phase.PLANNING and Phase.EXECUTING in phases and phases[-1] == Phase.SUCCEEDED
    assert any(p.recovering == {"s1": "dropped it"} and p.active_subtask_id == "s1" for p in run.progress)
    assert run.progress[-1].recovering == {} and run.dispatches[0].calls == ["s1"]
    assert "p7 says: Enjoy!" in run.log and run.log[-1].startswith("p7 (alice: 'serve me a carrot') ended:")


def test_a_refusal_moves_nothing_and_writes_nothing() -> None:
    run = Run()
    result = run.assist([json.dumps({"reply": "Sorry, no.", "refusal": "not possible"})])
    assert result.status == Status.REFUSED and result.message == "refused: not possible"
    assert run.memory.writes == [] and run.dispatches[0].calls == []
    assert result.progress.phase == Phase.REFUSED


def test_cancel_before_planning_ends_cancelled() -> None:
    run = Run(cancel=True)
    result = run.assist([json.dumps(SERVE)])
    assert result.status == Status.CANCELLED and result.message == "cancelled by the operator"
    assert run.memory.writes == [] and run.progress[-1].phase == Phase.CANCELLED


def test_unreachable_memory_and_unavailable_planning_fail_with_the_reason() -> None:
    run = Run(memory=FakeMemory(down=True))
    result = run.assist([json.dumps(SERVE)])
    assert result.status == Status.FAILED and result.message == "memory: memory/get_context not available"
    result = Run().assist(None)
    assert result.status == Status.FAILED and result.message == "planning unavailable: no model"


def test_no_summary_when_switched_off() -> None:
    run = Run()
    result = run.assist([json.dumps(SERVE)], summarise=False)
    assert result.status == Status.SUCCEEDED and "summariser" not in result.message
    assert [w[2] for w in run.memory.writes] == ["planner:p7", "planner:p7", "executive:p7"]


@pytest.mark.parametrize(
    ("destination", "scene", "expected"),
    [
        ("dining_table", SCENE, SceneWrite("move_item", "dining_table", item="carrot")),
        ("bowl", SCENE, SceneWrite("move_item", "dining_table", item="carrot in bowl")),
        ("bowl", {**SCENE, "shelf": ("bowl",)}, "scene memory not updated: no one location holds bowl"),
        ("", SCENE, None),
    ],
)
def test_where_a_moved_target_is_recorded(
    destination: str, scene: Mapping[str, tuple[str, ...]], expected: Any
) -> None:
    subtask = PlannedSubtask.model_validate({**CARROT, "destination": destination})
    assert move_after_success(subtask, scene) == expected


def test_nothing_to_summarise_is_said() -> None:
    result = Run().assist([json.dumps(SERVE), NOTHING])
    assert result.message.endswith("summariser: nothing lasting to remember")


def test_what_the_scene_holds_and_the_preferences_rule_out_is_said_left_out() -> None:
    """The LLM never proposed the meat: the validating progress (and so the audit log)
    still says the plan leaves it out and why; a scene without it says nothing of it."""
    run = Run(memory=FakeMemory(scene={**SCENE, "kitchen_counter": ("meat in plate", *SCENE["kitchen_counter"])}))
    run.assist([json.dumps(SERVE), json.dumps(SERVE), NOTHING])  # the look finds no meat: replanned, then stopped
    said = [p.message for p in run.progress if p.phase == Phase.VALIDATING]
    assert said and "left out for the user's preferences: meat (" in said[0] and "vegetarian" in said[0]
    assert any("left out for the user's preferences: meat" in line for line in run.log)
    plain = Run()
    assert plain.assist([json.dumps(SERVE), NOTHING]).status == Status.SUCCEEDED
    assert not any("left out" in p.message for p in plain.progress)
