"""Probe for test_shield_graph.py (run inside the graph's ROS domain): set the shield's
task, run the policy for a step budget, and print what the shield did as JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time

from action_msgs.msg import GoalStatus
from geometry_msgs.msg import PoseStamped

from carryon_common.calls import RosSession
from carryon_common.core import names
from carryon_interfaces.action import RunPolicy
from carryon_interfaces.msg import ActionChunk, ShieldEvent
from carryon_interfaces.srv import SetTask


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namespace", default=names.DEFAULT_NAMESPACE)
    parser.add_argument("--steps", type=int, default=80)
    args = parser.parse_args()
    ns = args.namespace
    events: list[ShieldEvent] = []
    released: list[int] = []
    poses: list[list[float]] = []
    with RosSession("shield_graph_probe") as session:
        node = session.node
        node.create_subscription(ShieldEvent, names.qualify(ns, names.SHIELD_EVENTS), events.append, 100)
        node.create_subscription(
            ActionChunk, names.qualify(ns, names.SHIELD_CHUNK), lambda m: released.append(len(m.steps)), 100
        )
        node.create_subscription(
            PoseStamped, names.qualify(ns, names.EE_POSE),
            lambda m: poses.append([m.pose.position.x, m.pose.position.y, m.pose.position.z]), 10,
        )  # fmt: skip
        task = SetTask.Request(subtask_id="s1", target="pink_cover", source="table", destination="table")
        response = session.call(SetTask, names.qualify(ns, names.SHIELD_SET_TASK), task, 30.0)
        deadline = time.monotonic() + 10.0
        while not poses and time.monotonic() < deadline:
            session.executor.spin_once(timeout_sec=0.05)
        start = list(poses[-1]) if poses else []
        goal = RunPolicy.Goal(instruction="open the pink cover", subtask_id="s1", step_budget=args.steps)
        status, result = session.send_goal_and_wait(
            RunPolicy, names.qualify(ns, names.RUN_POLICY), goal, server_timeout_s=30.0,
            result_timeout_s=args.steps * 0.2 + 60.0,
        )  # fmt: skip
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            session.executor.spin_once(timeout_sec=0.05)
    json.dump(
        {
            "set_task": [response.status, response.message],
            "goal_ok": status == GoalStatus.STATUS_SUCCEEDED,
            "message": result.message,
            "decisions": [e.decision for e in events],
            "reasons": [e.reason for e in events][:5],
            "obstacle_points": [e.obstacle_points for e in events],
            "released": released,
            "start": start,
            "end": poses[-1] if poses else [],
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
