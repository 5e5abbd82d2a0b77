"""Chunk stream of a running policy_node, printed as JSON (run as a child process by
`carryon bench policy`, inside the graph's private ROS domain).

Sends one RunPolicy goal and records when each ActionChunk arrives (wall clock), its stamp
(node clock: simulation time under the sim profile) and the InferenceTiming of each
inference.

    python -m carryon_bench.chunk_stream --namespace carryon --instruction "open the pink cover" --steps 200
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from action_msgs.msg import GoalStatus

from carryon_common.calls import RosSession
from carryon_common.convert import time_from_msg
from carryon_common.core import names
from carryon_interfaces.action import RunPolicy
from carryon_interfaces.msg import ActionChunk, InferenceTiming


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--namespace", default=names.DEFAULT_NAMESPACE)
    parser.add_argument("--instruction", required=True)
    parser.add_argument("--steps", type=int, default=200, help="step budget of the goal")
    args = parser.parse_args(argv)
    arrivals: list[float] = []
    stamps: list[float] = []

    def on_chunk(msg: ActionChunk) -> None:
        arrivals.append(time.perf_counter())
        stamps.append(time_from_msg(msg.header.stamp))

    infer_s: list[float] = []
    with RosSession("chunk_stream_probe") as session:
        node = session.node
        node.create_subscription(ActionChunk, names.qualify(args.namespace, names.POLICY_CHUNK), on_chunk, 100)
        timing_topic = names.qualify(args.namespace, names.POLICY_TIMING)
        node.create_subscription(InferenceTiming, timing_topic, lambda m: infer_s.append(m.infer_s), 100)
        goal = RunPolicy.Goal(instruction=args.instruction, subtask_id="bench", step_budget=args.steps)
        status, result = session.send_goal_and_wait(
            RunPolicy,
            names.qualify(args.namespace, names.RUN_POLICY),
            goal,
            server_timeout_s=30.0,
            result_timeout_s=args.steps * 0.2 + 30.0,
        )
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # the last chunk may still be in flight
            session.executor.spin_once(timeout_sec=0.05)
    ok = status == GoalStatus.STATUS_SUCCEEDED
    json.dump(
        {"ok": ok, "message": result.message, "arrivals": arrivals, "stamps": stamps, "infer_s": infer_s}, sys.stdout
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
