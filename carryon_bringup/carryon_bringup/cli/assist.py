"""`carryon ask`, `carryon assist`: requests to the planner, planned only or carried out end to end."""

from __future__ import annotations

import argparse
import time
from typing import Any

from carryon_bringup.cli.common import EXIT_FAILED, EXIT_OK, Subparsers, console, err, namespace, service_outcome


def add_ask(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    ask = sub.add_parser("ask", parents=[common], help="send a request to the planner on behalf of a user")
    ask.add_argument("--user", required=True, help="user id (memory/users/<id>.md)")
    ask.add_argument("--plan-only", action="store_true", help="plan and validate, do not execute")
    ask.add_argument("--request-timeout", type=float, default=300.0, help="seconds to wait for the plan (default 300)")
    ask.add_argument("text", help='the request, e.g. "Serve me food"')
    ask.set_defaults(handler=cmd_ask)


def add_assist(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    assist = sub.add_parser(
        "assist", parents=[common], help="carry out a request end to end (plan, execute, recover), with a transcript"
    )
    assist.add_argument("--user", required=True, help="user id (memory/users/<id>.md)")
    assist.add_argument(
        "--request-timeout", type=float, default=1800.0, help="cancel after this many seconds (default 1800)"
    )
    assist.add_argument("text", help='the request, e.g. "Serve me food"')
    assist.set_defaults(handler=cmd_assist)


def cmd_ask(args: argparse.Namespace) -> int:
    from carryon_bringup.node import GraphClient
    from carryon_common.convert import plan_state_name

    with GraphClient(namespace(args), args.timeout) as client:
        response = client.ask(args.user, args.text, args.plan_only, args.request_timeout)
    code = service_outcome(response.status, response.message)
    if code == EXIT_OK:
        console.print(f"[bold]reply:[/] {response.reply}")
        console.print(f"plan {response.plan.plan_id}: {plan_state_name(response.plan.state)}")
        for sub in response.plan.subtasks:
            console.print(f"  {sub.subtask.id} [{sub.subtask.kind}] {sub.subtask.instruction} {sub.message}")
    return code


def cmd_assist(args: argparse.Namespace) -> int:
    from action_msgs.msg import GoalStatus
    from rich.markup import escape

    from carryon_bringup.node import GraphClient
    from carryon_common.convert import plan_state_name, subtask_state_name
    from carryon_interfaces.action import Assist

    shown: dict[str, tuple[int, str]] = {}
    seen_plan: dict[str, Any] = {"state": (-1, ""), "json": ""}

    def progress(feedback: Assist.Feedback) -> None:
        plan = feedback.plan
        if (plan.state, plan.message) != seen_plan["state"]:
            seen_plan["state"] = (plan.state, plan.message)
            console.print(f"[dim]{plan_state_name(plan.state)}: {escape(plan.message)}[/]")
        if plan.plan_json != seen_plan["json"]:
            seen_plan["json"] = plan.plan_json
            if plan.subtasks:
                console.print(f"[bold]plan {plan.plan_id}[/]: {escape(plan.reply)}")
                for sub in plan.subtasks:
                    s = sub.subtask
                    what = s.instruction or s.objective
                    extra = "".join(
                        [
                            f" after {', '.join(s.depends_on)}" if s.depends_on else "",
                            f" only if {s.condition}" if s.condition else "",
                        ]
                    )
                    console.print(f"  {s.id} [{s.kind}] {escape(what)} {escape(s.target)}{escape(extra)}")
        for sub in plan.subtasks:
            key = f"{plan.plan_id}/{hash(plan.plan_json)}/{sub.subtask.id}"  # a replan runs its subtasks anew
            now = (sub.state, sub.message)
            if shown.get(key) != now and sub.state != 0:
                shown[key] = now
                console.print(f"  {sub.subtask.id} {subtask_state_name(sub.state)}: {escape(sub.message)}")

    from carryon_common.core import names
    from carryon_interfaces.msg import ShieldEvent

    decisions = {
        ShieldEvent.DECISION_RELEASED_PREFIX: "prefix",
        ShieldEvent.DECISION_RETREAT: "retreat",
        ShieldEvent.DECISION_REJECTED_STALE: "stale",
        ShieldEvent.DECISION_REJECTED_NO_PERCEPTION: "no perception",
        ShieldEvent.DECISION_REJECTED_ESTOP: "e-stop",
        ShieldEvent.DECISION_REJECTED_INVALID: "invalid",
    }
    blocked: dict[str, int] = {}
    last_line = {"t": 0.0}

    def on_shield(event: ShieldEvent) -> None:
        label = decisions.get(event.decision)
        if label is None:
            return
        blocked[label] = blocked.get(label, 0) + 1
        now = time.monotonic()
        if now - last_line["t"] >= 3.0:  # at most one line every 3 s
            last_line["t"] = now
            console.print(
                f"  [yellow]shield[/] {event.subtask_id}: {label}, released {event.released_steps}/"
                f"{event.total_steps}: {escape(event.reason)}"
            )

    console.print(f"[bold]{escape(args.user)}:[/] {escape(args.text)}")
    with GraphClient(namespace(args), args.timeout) as client:
        client.watch(ShieldEvent, names.SHIELD_EVENTS, on_shield)
        try:
            status, result = client.assist(args.user, args.text, args.request_timeout, progress)
        except KeyboardInterrupt:
            err.print("cancelled (the arm holds)")
            return EXIT_FAILED
    if status != GoalStatus.STATUS_SUCCEEDED and result.status == Assist.Result.STATUS_SUCCEEDED:
        err.print(f"failed: the planner ended the request without a result (goal status {status}; see its log)")
        return EXIT_FAILED
    outcome = {
        Assist.Result.STATUS_SUCCEEDED: "succeeded",
        Assist.Result.STATUS_FAILED: "failed",
        Assist.Result.STATUS_REFUSED: "refused",
        Assist.Result.STATUS_CANCELLED: "cancelled",
        Assist.Result.STATUS_NOT_IMPLEMENTED: "not implemented",
    }.get(result.status, f"status {result.status}")
    if blocked:
        console.print("shield: chunks not released whole: " + ", ".join(f"{k} {v}" for k, v in sorted(blocked.items())))
    console.print(f"[bold]reply:[/] {escape(result.reply)}")
    line = f"{outcome}: {result.message}"
    if result.status == Assist.Result.STATUS_SUCCEEDED:
        console.print(escape(line))
        return EXIT_OK
    err.print(line)
    return EXIT_FAILED
