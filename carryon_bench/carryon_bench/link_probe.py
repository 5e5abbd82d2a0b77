"""The robot side's eyes in the two-hosts test and benchmark (carryon_bringup/netns.py): runs
policy goals back to back on the policy node across the link for `--duration-s` and prints,
as JSON, when each chunk was released, each shield decision and each tool pose (wall-clock
seconds), and how each goal ended. The caller drops and restores the link meanwhile and reads
from the timelines how the robot side lived through it. Before each drop the caller has the
simulator reset (a benchmark's harness, as `carryon bench` resets episodes), so that the
scripted stand-in starts its motion again and the arm is moving when the link drops."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from geometry_msgs.msg import PoseStamped

from carryon_common.calls import RosSession
from carryon_common.core import names
from carryon_common.core.errors import CarryOnError
from carryon_common.qos import qos_for
from carryon_interfaces.action import RunPolicy
from carryon_interfaces.msg import ActionChunk, ShieldEvent
from carryon_interfaces.srv import SetTask, SimReset

INSTRUCTION, TARGET = "open the pink cover", "pink_cover"
GOAL_TIMEOUT_S = 20.0  # a goal whose result the link lost is given up (cancelled) after this


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namespace", default=names.DEFAULT_NAMESPACE)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--steps", type=int, default=48, help="step budget of each goal")
    parser.add_argument(
        "--signal-dir",
        type=Path,
        help="the caller creates `reset` in it: the simulator is reset before the next goal, so the arm moves "
        "again; the probe creates `moving` at the first release after that",
    )
    args = parser.parse_args(argv)
    ns = f"/{args.namespace}/"
    out: dict[str, list[Any]] = {"released": [], "decisions": [], "poses": [], "goals": [], "resets": []}
    with RosSession("link_probe") as session:
        node = session.node

        reset = [False]  # a reset was made and no chunk released since

        def released(m: ActionChunk) -> None:
            out["released"].append([time.time(), int(m.chunk_id)])
            if reset[0] and args.signal_dir is not None:
                (args.signal_dir / "moving").touch()
                reset[0] = False

        node.create_subscription(ActionChunk, ns + names.SHIELD_CHUNK, released, qos_for(names.SHIELD_CHUNK))
        node.create_subscription(
            ShieldEvent,
            ns + names.SHIELD_EVENTS,
            lambda m: out["decisions"].append([time.time(), int(m.decision), int(m.released_steps), m.reason]),
            qos_for(names.SHIELD_EVENTS),
        )

        def pose(m: PoseStamped) -> None:
            out["poses"].append([time.time(), m.pose.position.x, m.pose.position.y, m.pose.position.z])

        node.create_subscription(PoseStamped, ns + names.EE_POSE, pose, qos_for(names.EE_POSE))
        task = SetTask.Request(subtask_id="link", target=TARGET, source="kitchen_counter")
        session.call(SetTask, ns + names.SHIELD_SET_TASK, task, timeout_s=10.0)
        end = time.time() + args.duration_s
        signal.signal(signal.SIGTERM, _stop)
        try:
            _run_goals(session, ns, args, end=end, out=out, reset=reset)
        except KeyboardInterrupt:  # stopped by the caller: what was seen so far
            out["stopped"] = [time.time()]
        for _ in range(10):
            session.executor.spin_once(timeout_sec=0.05)
    json.dump(out, sys.stdout)
    return 0


def _stop(*_args: object) -> None:
    raise KeyboardInterrupt


def _run_goals(
    session: RosSession, ns: str, args: argparse.Namespace, *, end: float, out: dict[str, list[Any]], reset: list[bool]
) -> None:
    """Goals back to back until `end`, the simulator reset first when the caller asks."""
    while time.time() < end:
        if args.signal_dir is not None and (args.signal_dir / "reset").exists():
            (args.signal_dir / "reset").unlink()
            answer = session.call(SimReset, ns + names.SIM_RESET, SimReset.Request(), timeout_s=10.0)
            out["resets"].append([time.time(), int(answer.status), answer.message])
            reset[0] = True
        goal = RunPolicy.Goal(instruction=INSTRUCTION, subtask_id="link", step_budget=args.steps)
        began = time.time()
        try:
            status, result = session.send_goal_and_wait(
                RunPolicy,
                ns + names.RUN_POLICY,
                goal,
                server_timeout_s=min(10.0, max(1.0, end - began)),
                result_timeout_s=min(GOAL_TIMEOUT_S, max(1.0, end - began)),
            )
            ended = [began, time.time(), int(status), int(result.status), result.message]
        except CarryOnError as exc:  # the link is down: the server is not found, or the goal is lost
            ended = [began, time.time(), -1, -1, f"{type(exc).__name__}: {exc}"]
            session.executor.spin_once(timeout_sec=0.5)
        out["goals"].append(ended)


if __name__ == "__main__":
    sys.exit(main())
