"""planner_node's Assist action in-process with a real memory_node and fake peers for the
policy, shield and judge (the real ones run in test/test_assist_graph.py): cancel stops
the running policy and nothing else starts; a second request while one runs is rejected;
a policy that refuses the instruction fails the subtask without a recovery."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from planner_fixtures import ScriptedLlm
from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.parameter import Parameter

from carryon_common.actions import ActionClient
from carryon_interfaces.action import Assist, Recover, RunPolicy
from carryon_interfaces.msg import SubtaskState, Verdict
from carryon_interfaces.srv import Judge, SetTask
from carryon_memory.node import MemoryNode
from carryon_planner.node import PlannerNode

REPO = Path(__file__).resolve().parents[2]
UNCOVER = {"id": "s1", "kind": "vla", "objective": "the cover is off", "instruction": "open the pink cover",
           "target": "pink_cover", "source": "kitchen_counter"}  # fmt: skip
TELL = {"id": "s2", "kind": "say", "objective": "tell the user the cover is off", "depends_on": ["s1"]}
OPEN = {"reply": "I will open the pink cover.", "subtasks": [UNCOVER, TELL]}


class FakeGraph:
    """shield/set_task, judge/judge (always running), policy/run (runs until cancelled or
    refuses), recovery/recover (counts calls)."""

    def __init__(self, ros: Any, *, refuse: bool = False) -> None:
        node = ros.peer("fake_graph")
        group = ReentrantCallbackGroup()
        self.refuse = refuse
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.recoveries = 0
        node.create_service(SetTask, "shield/set_task", self._set_task, callback_group=group)
        node.create_service(Judge, "judge/judge", self._judge, callback_group=group)
        self._policy = ActionServer(node, RunPolicy, "policy/run", execute_callback=self._run,
                                    cancel_callback=lambda _h: CancelResponse.ACCEPT, callback_group=group)  # fmt: skip
        self._recover = ActionServer(node, Recover, "recovery/recover", execute_callback=self._recovery,
                                     callback_group=group)  # fmt: skip

    @staticmethod
    def _set_task(_request: SetTask.Request, response: SetTask.Response) -> SetTask.Response:
        response.status = SetTask.Response.STATUS_OK
        return response

    @staticmethod
    def _judge(request: Judge.Request, response: Judge.Response) -> Judge.Response:
        response.status = Judge.Response.STATUS_OK
        response.verdict = Verdict(subtask_id=request.subtask.id, status=Verdict.STATUS_RUNNING, reason="not yet")
        return response

    def _run(self, handle: Any) -> RunPolicy.Result:
        result = RunPolicy.Result()
        if self.refuse:
            result.status, result.message = RunPolicy.Result.STATUS_REFUSED, "unknown instruction"
            handle.abort()
            return result
        self.started.set()
        steps = 0
        while steps < handle.request.step_budget:
            if handle.is_cancel_requested:
                self.cancelled.set()
                result.status, result.steps_executed = RunPolicy.Result.STATUS_SUSPENDED, steps
                handle.canceled()
                return result
            time.sleep(0.02)
            steps += 1
            handle.publish_feedback(RunPolicy.Feedback(steps_executed=steps))
        result.status, result.steps_executed = RunPolicy.Result.STATUS_BUDGET_EXHAUSTED, steps
        handle.succeed()
        return result

    def _recovery(self, handle: Any) -> Recover.Result:
        self.recoveries += 1
        handle.succeed()
        return Recover.Result(outcome=Recover.Result.OUTCOME_RESUME)


def seed(tmp_path: Path) -> Path:
    """The shipped seed memory, but a scene that does not remember the pink cover: a plan
    acting on a remembered object would wait for an observe step (validator
    observe_before_act), and this fake graph has no perception to observe with."""
    folder = tmp_path / "seed"
    shutil.copytree(REPO / "config" / "memory", folder)
    (folder / "scene.md").write_text(
        "# Scene memory\n\n## kitchen_counter\n- contents: plate\n- observed: never\n- source: initial\n"
    )
    return folder


def start(ros: Any, tmp_path: Path, replies: list[str], **graph: Any) -> FakeGraph:
    memory = [Parameter("memory_dir", value=str(tmp_path / "memory")),
              Parameter("seed_dir", value=str(seed(tmp_path)))]  # fmt: skip
    ros.add(MemoryNode(namespace="carryon", context=ros.context, parameter_overrides=memory))
    planner = [Parameter("summarise", value=False), Parameter("judge_period_s", value=0.2),
               Parameter("policy_step_budget", value=2000), Parameter("plan_format", value="full")]  # fmt: skip
    node = ros.add(PlannerNode(ScriptedLlm(replies), namespace="carryon", context=ros.context,
                               parameter_overrides=planner))  # fmt: skip
    fake = FakeGraph(ros, **graph)
    # The planner's own clients see the fake peers before the first request (its wait for
    # them is 10 s, which a loaded CI machine has exceeded).
    for kind, name in ((RunPolicy, "policy/run"), (Recover, "recovery/recover")):
        assert node.action_client(kind, name).wait_for_server(timeout_sec=60.0), name
    return fake


class Console:
    def __init__(self, ros: Any) -> None:
        self.client = ActionClient(ros.peer("console"), Assist, "planner/assist")
        assert self.client.wait_for_server(timeout_sec=10.0)

    def send(self, text: str) -> Any:
        done = threading.Event()
        future = self.client.send_goal_async(Assist.Goal(user_id="alice", text=text))
        future.add_done_callback(lambda _f: done.set())
        assert done.wait(10.0)
        return future.result()

    @staticmethod
    def result(handle: Any, timeout_s: float = 30.0) -> Assist.Result:
        done = threading.Event()
        future = handle.get_result_async()
        future.add_done_callback(lambda _f: done.set())
        assert done.wait(timeout_s)
        return future.result().result


def states(result: Assist.Result) -> dict[str, int]:
    return {s.subtask.id: s.state for s in result.plan.subtasks}


def test_cancel_stops_the_policy_and_nothing_else_starts(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    graph = start(ros, tmp_path, [json.dumps(OPEN)])
    console = Console(ros)
    handle = console.send("open the pink cover")
    assert handle.accepted
    assert graph.started.wait(10.0)  # the policy runs s1
    handle.cancel_goal_async()
    result = console.result(handle)
    assert result.status == Assist.Result.STATUS_CANCELLED, result.message
    assert graph.cancelled.is_set()  # the running policy goal was cancelled (the arm holds)
    assert states(result) == {"s1": SubtaskState.STATE_FAILED, "s2": SubtaskState.STATE_CANCELLED}
    assert graph.recoveries == 0


def test_a_second_request_while_one_runs_is_rejected(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    graph = start(ros, tmp_path, [json.dumps(OPEN)])
    console = Console(ros)
    first = console.send("open the pink cover")
    assert first.accepted and graph.started.wait(10.0)
    second = console.send("open the pink cover")
    assert not second.accepted
    first.cancel_goal_async()
    assert console.result(first).status == Assist.Result.STATUS_CANCELLED


def test_a_refused_instruction_fails_the_subtask_without_recovery(ros, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    graph = start(ros, tmp_path, [json.dumps(OPEN)], refuse=True)
    result = Console.result(Console(ros).send("open the pink cover"))
    assert result.status == Assist.Result.STATUS_FAILED
    assert "policy refused: unknown instruction" in result.message
    assert states(result) == {"s1": SubtaskState.STATE_FAILED, "s2": SubtaskState.STATE_CANCELLED}
    assert graph.recoveries == 0
