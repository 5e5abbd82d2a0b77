"""The client side of `carryon bench latency`, run in the graph's ROS domain: times each
stage of the running graph and prints the samples as JSON (milliseconds).

policy -> released is timed from DDS's source timestamps (the publishers' own clock
readings as each message was written, same host), not from when this probe's executor
took the messages: a busy probe took some releases before their policy chunks, which gave
negative latencies."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from rclpy.subscription import MessageInfo

from carryon_common.calls import RosSession
from carryon_common.core import names
from carryon_interfaces.action import RunPolicy
from carryon_interfaces.msg import ActionChunk, InferenceTiming, ShieldEvent, Subtask
from carryon_interfaces.srv import Ask, Judge, SetTask


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namespace", default=names.DEFAULT_NAMESPACE)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    ns = f"/{args.namespace}/"
    policy_tx: dict[int, int] = {}  # chunk id -> source timestamp, ns
    shield_tx: dict[int, int] = {}
    compute_ms: list[float] = []
    infer_ms: list[float] = []
    out: dict[str, Any] = {}
    with RosSession("latency_probe") as session:
        node = session.node

        def sent(into: dict[int, int]) -> Any:
            def callback(msg: ActionChunk, info: MessageInfo) -> None:
                into.setdefault(int(msg.chunk_id), int(info["source_timestamp"]))

            return callback

        node.create_subscription(ActionChunk, ns + names.POLICY_CHUNK, sent(policy_tx), 50)
        node.create_subscription(ActionChunk, ns + names.SHIELD_CHUNK, sent(shield_tx), 50)
        refused: list[str] = []

        def event(msg: ShieldEvent) -> None:
            compute_ms.append(1e3 * msg.compute_time_s)
            if msg.released_steps == 0:
                refused.append(msg.reason)

        node.create_subscription(ShieldEvent, ns + names.SHIELD_EVENTS, event, 50)
        node.create_subscription(
            InferenceTiming, ns + names.POLICY_TIMING, lambda m: infer_ms.append(1e3 * m.infer_s), 50
        )
        task = SetTask.Request(subtask_id="lat", target="pink_cover", source="kitchen_counter")
        session.call(SetTask, ns + names.SHIELD_SET_TASK, task, timeout_s=10.0)
        goal = RunPolicy.Goal(instruction="open the pink cover", subtask_id="lat", step_budget=args.steps)
        session.send_goal_and_wait(
            RunPolicy, ns + names.RUN_POLICY, goal, server_timeout_s=10.0, result_timeout_s=args.steps / 20.0 * 4 + 60.0
        )
        for _ in range(20):  # the last chunks' messages
            session.executor.spin_once(timeout_sec=0.05)
        out["policy_infer_ms"] = infer_ms
        out["policy_to_released_ms"] = [1e-6 * (shield_tx[i] - policy_tx[i]) for i in shield_tx if i in policy_tx]
        out["shield_compute_ms"] = compute_ms
        out["chunks"] = len(policy_tx)
        out["released_chunks"] = len(shield_tx)
        out["refused"] = refused
        if args.calls > 0:  # 0: the policy -> shield path only (no judge or planner in the graph)
            _time_calls(session, ns, args.calls, out)
    json.dump(out, sys.stdout)
    return 0


def _time_calls(session: RosSession, ns: str, calls: int, out: dict[str, Any]) -> None:
    """Judge and planner round trips."""
    subtask = Subtask(
        id="lat", kind="vla", objective="the cover is off", instruction="open the pink cover", target="pink_cover"
    )
    judge_ms = []
    for _ in range(calls):
        began = time.perf_counter()
        answer = session.call(
            Judge, ns + names.JUDGE, Judge.Request(subtask=subtask, since_progress_s=0.0), timeout_s=30.0
        )
        judge_ms.append(1e3 * (time.perf_counter() - began))
    out["judge_ms"] = judge_ms
    out["judge_backend"] = answer.verdict.backend
    plan_ms = []
    request = Ask.Request(user_id="alice", text="Serve me food", plan_only=True)
    for _ in range(calls):
        began = time.perf_counter()
        asked = session.call(Ask, ns + names.ASK, request, timeout_s=60.0)
        plan_ms.append(1e3 * (time.perf_counter() - began))
    out["planner_ms"] = plan_ms
    out["planner_status"] = asked.status


if __name__ == "__main__":
    sys.exit(main())
