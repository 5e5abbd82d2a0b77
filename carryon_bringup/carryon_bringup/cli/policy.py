"""`carryon policy run`: the VLA alone on one instruction, through the shield."""

from __future__ import annotations

import argparse

from carryon_bringup.cli.common import (
    EXIT_FAILED,
    EXIT_NOT_IMPLEMENTED,
    EXIT_OK,
    EXIT_USAGE,
    Subparsers,
    console,
    err,
    namespace,
    service_outcome,
)


def add_policy(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    policy = sub.add_parser("policy", parents=[common], help="run the VLA alone on one instruction")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True, metavar="ACTION")
    prun = policy_sub.add_parser(
        "run",
        parents=[common],
        help="send a RunPolicy goal and follow it (Ctrl-C suspends it)",
        description="Runs the policy node's backend on INSTRUCTION (verbatim from config/skills/library.yaml) "
        "for --steps control steps. Its chunks go through the shield like every other motion.",
    )
    prun.add_argument("instruction", help='e.g. "open the pink cover"')
    prun.add_argument("--steps", type=int, default=200, help="step budget (default 200 = 10 s at 20 Hz)")
    prun.add_argument("--subtask", default="cli", help="subtask id stamped on the chunks (default cli)")
    prun.add_argument("--target", default="", help="object acted on: the shield does not treat it as an obstacle")
    prun.add_argument("--source", default="", help="where the target is taken from (a patch beneath it is exempt)")
    prun.add_argument("--destination", default="", help="where it goes (exempt from the obstacles)")
    policy.set_defaults(handler=cmd_policy)


def cmd_policy(args: argparse.Namespace) -> int:
    from action_msgs.msg import GoalStatus

    from carryon_bringup.node import GraphClient
    from carryon_interfaces.action import RunPolicy

    if args.steps < 1:
        err.print("--steps: must be >= 1")
        return EXIT_USAGE
    shown = {"chunks": -1}

    def progress(feedback: RunPolicy.Feedback) -> None:
        if feedback.chunks_sent != shown["chunks"]:
            shown["chunks"] = feedback.chunks_sent
            console.print(
                f"  {feedback.steps_executed}/{args.steps} steps, {feedback.chunks_sent} chunks, "
                f"inference {feedback.last_infer_s * 1e3:.1f} ms"
            )

    with GraphClient(namespace(args), args.timeout) as client:
        if args.target or args.source or args.destination:
            task = client.set_task(args.subtask, args.target, args.source, args.destination)
            if task.status != task.STATUS_OK:
                return service_outcome(task.status, f"shield/set_task: {task.message}")
        status, result = client.run_policy(args.instruction, args.steps, args.subtask, progress)
    outcome = {
        RunPolicy.Result.STATUS_BUDGET_EXHAUSTED: "budget spent",
        RunPolicy.Result.STATUS_SUSPENDED: "suspended",
        RunPolicy.Result.STATUS_REFUSED: "refused",
        RunPolicy.Result.STATUS_FAILED: "failed",
        RunPolicy.Result.STATUS_NOT_IMPLEMENTED: "not implemented",
    }.get(result.status, f"status {result.status}")
    line = f"{outcome}: {result.message}"
    if status == GoalStatus.STATUS_SUCCEEDED:
        console.print(line)
        return EXIT_OK
    err.print(line)
    return EXIT_NOT_IMPLEMENTED if result.status == RunPolicy.Result.STATUS_NOT_IMPLEMENTED else EXIT_FAILED
