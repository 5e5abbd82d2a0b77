"""`carryon`: the operator CLI — what a console would do with `ros2 service call`.

Exit codes: 0 success; 1 request failed or graph not (fully) ready; 2 usage or
configuration error; 3 graph unreachable (nothing answered within the timeout);
4 the answering node does not implement the request yet.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from carryon_common.core.errors import CarryOnError
from carryon_common.core.status import NodeHealth, ServiceStatus

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NOT_IMPLEMENTED = 4

DEFAULT_TIMEOUT_S = 10.0  # a new process discovers 8 nodes over DDS; 5 s was short on a loaded 2-core machine

console = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _parser() -> argparse.ArgumentParser:
    # Common options work before or after the command (`carryon --timeout 2 status` or
    # `carryon status --timeout 2`); SUPPRESS keeps a subcommand from resetting them.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config-dir",
        default=argparse.SUPPRESS,
        help="config folder holding graph.yaml (default: $CARRYON_CONFIG_DIR, ./config)",
    )
    common.add_argument(
        "--timeout",
        type=float,
        default=argparse.SUPPRESS,
        help=f"seconds to wait for the graph to answer (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser = argparse.ArgumentParser(
        prog="carryon", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, parents=[common]
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", parents=[common], help="start the graph, one process per node (Ctrl-C stops it)")
    up.add_argument(
        "--profile", help="profile from graph.yaml (default: $CARRYON_PROFILE, else graph.yaml's default_profile)"
    )
    up.add_argument("--only", action="append", default=[], metavar="NODE", help="start only this node (repeatable)")
    up.add_argument(
        "--set", action="append", default=[], metavar="NODE.KEY=VALUE", help="override a parameter (repeatable)"
    )
    up.add_argument("--run-dir", help="folder for logs and records (default runs/<time>-up-<profile>)")
    up.add_argument("--log-level", choices=["debug", "info", "warn", "error"], help="ROS log level of every node")
    up.add_argument("--ready-timeout", type=float, default=30.0, help="warn when nodes are not ready after this many s")
    up.add_argument(
        "--stop-timeout", type=float, default=4.0, help="SIGKILL nodes still alive this many s after Ctrl-C"
    )

    status = sub.add_parser("status", parents=[common], help="which nodes are up and ready, with their capabilities")
    status.add_argument(
        "--profile", help="profile whose nodes to query (default: $CARRYON_PROFILE, else graph.yaml's default_profile)"
    )
    status.add_argument("--json", action="store_true", help="print machine-readable JSON")
    status.add_argument("-v", "--verbose", action="store_true", help="list every capability")

    ask = sub.add_parser("ask", parents=[common], help="send a request to the planner on behalf of a user")
    ask.add_argument("--user", required=True, help="user id (memory/users/<id>.md)")
    ask.add_argument("--plan-only", action="store_true", help="plan and validate, do not execute")
    ask.add_argument("--request-timeout", type=float, default=120.0, help="seconds to wait for the plan (default 120)")
    ask.add_argument("text", help='the request, e.g. "Serve me food"')

    assist = sub.add_parser(
        "assist", parents=[common], help="carry out a request end to end (plan, execute, recover), with a transcript"
    )
    assist.add_argument("--user", required=True, help="user id (memory/users/<id>.md)")
    assist.add_argument(
        "--request-timeout", type=float, default=1800.0, help="cancel after this many seconds (default 1800)"
    )
    assist.add_argument("text", help='the request, e.g. "Serve me food"')

    perturb = sub.add_parser(
        "perturb", parents=[common], help="simulator only: perturb the world now, or once an object is lifted"
    )
    perturb.add_argument("kind", choices=["drop", "displace", "relocate", "slip", "uncover", "cover", "place"])
    perturb.add_argument("--object", default="", help="object to perturb (scene name; not needed for drop)")
    perturb.add_argument("--by", nargs=3, type=float, default=[0.0, 0.0, 0.0], metavar=("DX", "DY", "DZ"),
                         help="displace: metres, world frame")  # fmt: skip
    perturb.add_argument("--location", default="", help="relocate / place: location; cover: the item to hide")
    perturb.add_argument("--when-lifted", default="", metavar="OBJECT",
                         help="wait until OBJECT is held and lifted by --lift-m, then perturb")  # fmt: skip
    perturb.add_argument("--lift-m", type=float, default=0.05, help="lift that triggers --when-lifted (default 0.05)")
    perturb.add_argument("--near", nargs=2, metavar=("OBJECT", "METRES"),
                         help="with --when-lifted: only once it is carried within METRES (xy) of OBJECT")  # fmt: skip
    perturb.add_argument("--wait-timeout", type=float, default=900.0, help="give up waiting after this many s")

    replay_p = sub.add_parser("replay", help="play a recorded run (bag/) back into ROS for rviz, and/or to Foxglove")
    replay_p.add_argument("bag", help="a bag folder, e.g. runs/<time>-demo/bag")
    replay_p.add_argument("--rate", type=float, default=1.0, help="speed factor (default 1.0)")
    replay_p.add_argument("--prefix", default="", help="publish under this namespace, e.g. /replay")
    replay_p.add_argument("--topic", action="append", default=[], help="only this recorded topic (repeatable)")
    replay_p.add_argument("--foxglove-port", type=int, default=0, help="also serve it live to Foxglove on this port")
    replay_p.add_argument("--no-ros", action="store_true", help="Foxglove only: do not publish into ROS")

    report = sub.add_parser("report", help="write a run folder's report: metrics.json, report.png, report.md")
    report.add_argument("run_dir", help="a run folder of carryon up / make demo (with bag/ and audit.jsonl)")

    memory = sub.add_parser("memory", parents=[common], help="user and scene memory")
    memory_sub = memory.add_subparsers(dest="memory_command", required=True, metavar="ACTION")
    show = memory_sub.add_parser(
        "show", parents=[common], help="print the planner context of a user (or scene memory only)"
    )
    show.add_argument("--user", default="", help="user id ('' = scene memory only)")
    mset = memory_sub.add_parser(
        "set",
        parents=[common],
        help="remember a durable fact of a user (replaces the old value, which stays in the history)",
        description='Store `- KEY: VALUE` under `## ENTITY` in memory/users/USER.md. An empty VALUE ("") '
        "removes the fact. Only durable facts are stored: temporary wishes belong to a request, not to memory.",
    )
    mset.add_argument("--user", required=True, help="user id (memory/users/<id>.md)")
    mset.add_argument("--source", default="operator:cli", help="recorded in the journal (default operator:cli)")
    mset.add_argument("entity", help="section, e.g. diet")
    mset.add_argument("key", help="attribute, e.g. preference")
    mset.add_argument("value", help='value, e.g. vegetarian ("" removes the fact)')
    image = memory_sub.add_parser(
        "remember-image", parents=[common], help="store a reference image (PNG/JPEG) of a user's object, e.g. their mug"
    )
    image.add_argument("--user", required=True, help="user id (memory/users/<id>.md)")
    image.add_argument("--key", default="reference_image", help="attribute to record it under")
    image.add_argument("--source", default="operator:cli", help="recorded in the journal (default operator:cli)")
    image.add_argument("entity", help="the object, e.g. mug")
    image.add_argument("file", help="a .png or .jpg file")
    history = memory_sub.add_parser("history", parents=[common], help="journal of memory changes, newest first")
    history.add_argument("--file", default="", help="only this file, e.g. users/alice.md or scene.md")
    history.add_argument("--limit", type=int, default=20, help="most entries shown (0 = all; default 20)")
    restore = memory_sub.add_parser(
        "restore",
        parents=[common],
        help="bring every memory file back to a version (recorded as a new change, so it can be undone)",
    )
    restore.add_argument("version", type=int, help="version to restore (see `carryon memory history`)")

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

    estop = sub.add_parser("estop", parents=[common], help="engage (or --release) the emergency stop")
    estop.add_argument("--release", action="store_true", help="release instead of engage")
    estop.add_argument("--reason", default="operator CLI", help="recorded with the state change")

    bench = sub.add_parser("bench", parents=[common], help="run a benchmark (see --list)")
    bench.add_argument("name", nargs="?", help="benchmark name")
    bench.add_argument("--list", action="store_true", help="list benchmarks")
    bench.add_argument("--quick", action="store_true", help="a short run (CI-sized)")
    bench.add_argument("--seed", type=int, default=0, help="random seed (recorded)")
    bench.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    bench.add_argument("--resume", metavar="RUN_DIR",
                       help="continue an interrupted run in its folder (benchmarks saving rows: safety, "
                       "recovery, personalization)")  # fmt: skip
    bench.add_argument(
        "--set", action="append", default=[], metavar="NODE.KEY=VALUE",
        help="override a node parameter for benchmarks that build a node's backend, e.g. "
        "--set planner_node.llm_backend=openai (repeatable)",
    )  # fmt: skip
    audit = sub.add_parser("audit", parents=[common], help="the tamper-evident decision log of a run")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    averify = audit_sub.add_parser("verify", parents=[common], help="check every line's hash and link")
    averify.add_argument("file", help="e.g. runs/<run>/audit.jsonl")
    averify.add_argument("--last", default="", help="the hash the chain must end with (detects cut-off lines)")

    reflect_cmd = sub.add_parser(
        "reflect",
        parents=[common],
        help="versioned recovery skills: show, diff, or revise one from failed attempts",
        description="Without --attempts: show a skill's version (newest unless --version), or --diff A B. "
        "With --attempts FILE (JSONL of recovery attempts): an OpenAI-compatible LLM reviews up to three failed "
        "ones and proposes one revision; a valid proposal is written as the next version, an invalid one is "
        "rejected with the reason.",
    )
    reflect_cmd.add_argument("skill", help="e.g. regrasp")
    reflect_cmd.add_argument("--skills-dir", default="", help="library folder (default: <config dir>/skills/recovery)")
    reflect_cmd.add_argument("--version", type=int, default=None, help="version to show or start from")
    reflect_cmd.add_argument("--diff", type=int, nargs=2, metavar=("A", "B"), help="what changed from vA to vB")
    reflect_cmd.add_argument("--attempts", default="", help="JSONL file of recovery attempts to review")
    reflect_cmd.add_argument("--base-url", default="http://127.0.0.1:8080/v1", help="OpenAI-compatible endpoint")
    reflect_cmd.add_argument("--model", default="", help="model name sent to the endpoint")
    reflect_cmd.add_argument("--api-key-env", default="OPENAI_API_KEY", help="variable holding the key")
    reflect_cmd.add_argument("--llm-timeout", type=float, default=120.0, help="seconds per LLM request")
    return parser


def cmd_audit(args: argparse.Namespace) -> int:
    from carryon_common.core.audit import verify

    check = verify(Path(args.file), expect_last=args.last)
    if check.ok:
        console.print(f"{args.file}: {check.entries} entries, chain intact; last hash {check.last_hash}")
        return EXIT_OK
    err.print(f"{args.file}: BROKEN after {check.entries} good entries: {check.problem}")
    return EXIT_FAILED


def cmd_reflect(args: argparse.Namespace) -> int:
    import yaml

    from carryon_planner.core.openai_llm import make_openai_llm
    from carryon_recovery.core.library import SkillLibrary, diff
    from carryon_recovery.core.reflection import Attempt, reflect

    root = Path(args.skills_dir) if args.skills_dir else Path(args.config_dir or "config") / "skills" / "recovery"
    library = SkillLibrary(root)
    if args.diff:
        old, new = (library.load(args.skill, v) for v in args.diff)
        for line in diff(old, new) or ["no differences"]:
            console.print(line)
        return EXIT_OK
    if not args.attempts:
        version = library.load(args.skill, args.version)
        console.print(yaml.safe_dump(version.model_dump(mode="json"), sort_keys=False), end="")
        return EXIT_OK
    lines = Path(args.attempts).read_text(encoding="utf-8").splitlines()
    try:
        attempts = [Attempt.model_validate_json(line) for line in lines if line.strip()]
    except ValueError as exc:
        err.print(f"error: {args.attempts}: not a JSONL file of recovery attempts: {exc}")
        return EXIT_USAGE
    llm = make_openai_llm(args.base_url, args.model, args.api_key_env, args.llm_timeout)
    outcome = reflect(llm, library, args.skill, attempts, version=args.version)
    if outcome.written is not None:
        console.print(f"{args.skill} v{outcome.written.version} written: {outcome.reason}")
        return EXIT_OK
    (console if outcome.decision == "NO_UPDATE" else err).print(f"{outcome.decision}: {outcome.reason}")
    return EXIT_OK if outcome.decision == "NO_UPDATE" else EXIT_FAILED


def _namespace(args: argparse.Namespace) -> str:
    from carryon_bringup.up import load_spec

    return load_spec(args.config_dir).namespace


def _service_outcome(status: int, message: str) -> int:
    if status == ServiceStatus.OK:
        return EXIT_OK
    try:
        label = ServiceStatus(status).label
    except ValueError:
        label = f"status {status}"
    err.print(f"[bold]{label}[/]: {message}")
    return EXIT_NOT_IMPLEMENTED if status == ServiceStatus.NOT_IMPLEMENTED else EXIT_FAILED


def _health_json(h: NodeHealth | None) -> dict[str, object] | None:
    if h is None:
        return None
    return {
        "ready": h.ready,
        "state": h.state.name.lower(),
        "message": h.message,
        "pid": h.pid,
        "uptime_s": round(h.uptime_s, 2),
        "backends": list(h.backends),
        "capabilities": [{"name": c.name, "implemented": c.implemented, "detail": c.detail} for c in h.capabilities],
    }


def _print_status_table(title: str, health: dict[str, NodeHealth | None], verbose: bool) -> None:
    table = Table(title=title)
    for column in ("node", "state", "pid", "up", "backends", "implemented"):
        table.add_column(column)
    for name, h in health.items():
        if h is None:
            table.add_row(name, "[red]down[/]", "", "", "", "")
            continue
        color = "green" if h.ready else "yellow"
        done = sum(c.implemented for c in h.capabilities)
        row = (h.state.name.lower(), str(h.pid), f"{h.uptime_s:.0f}s", " ".join(h.backends))
        table.add_row(name, f"[{color}]{row[0]}[/]", *row[1:], f"{done}/{len(h.capabilities)}")
    console.print(table)
    missing = {name: h.missing for name, h in health.items() if h is not None and h.missing}
    if not missing:
        return
    if not verbose:
        count = sum(len(m) for m in missing.values())
        console.print(
            f"[yellow]scaffolding:[/] {count} capabilities are not implemented yet (`carryon status -v` lists them)"
        )
        return
    for name, caps in missing.items():
        for cap in caps:
            console.print(f"  [yellow]{name}[/] {cap.name}: {cap.detail}")


def cmd_status(args: argparse.Namespace) -> int:
    from carryon_bringup.node import GraphClient
    from carryon_bringup.up import load_spec

    spec = load_spec(args.config_dir)
    args.profile = spec.resolve_profile(args.profile)
    node_names = [launch.name for launch in spec.launches(args.profile)]
    with GraphClient(spec.namespace, args.timeout) as client:
        health = client.statuses(node_names)
    if args.json:
        print(json.dumps({name: _health_json(h) for name, h in health.items()}, indent=2))
    else:
        _print_status_table(f"CarryOn graph /{spec.namespace} (profile {args.profile})", health, args.verbose)
    if all(h is None for h in health.values()):
        domain = os.environ.get("ROS_DOMAIN_ID", "0")
        err.print(
            f"no CarryOn node answered within {args.timeout:.0f} s (ROS_DOMAIN_ID={domain}); "
            "is the graph running? Start it with `carryon up`."
        )
        return EXIT_UNREACHABLE
    return EXIT_OK if all(h is not None and h.ready for h in health.values()) else EXIT_FAILED


def cmd_ask(args: argparse.Namespace) -> int:
    from carryon_bringup.convert import plan_state_name
    from carryon_bringup.node import GraphClient

    with GraphClient(_namespace(args), args.timeout) as client:
        response = client.ask(args.user, args.text, args.plan_only, args.request_timeout)
    code = _service_outcome(response.status, response.message)
    if code == EXIT_OK:
        console.print(f"[bold]reply:[/] {response.reply}")
        console.print(f"plan {response.plan.plan_id}: {plan_state_name(response.plan.state)}")
        for sub in response.plan.subtasks:
            console.print(f"  {sub.subtask.id} [{sub.subtask.kind}] {sub.subtask.instruction} {sub.message}")
    return code


def cmd_assist(args: argparse.Namespace) -> int:
    from action_msgs.msg import GoalStatus
    from rich.markup import escape

    from carryon_bringup.convert import plan_state_name, subtask_state_name
    from carryon_bringup.node import GraphClient
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
                    extra = "".join([f" after {', '.join(s.depends_on)}" if s.depends_on else "",
                                     f" only if {s.condition}" if s.condition else ""])  # fmt: skip
                    console.print(f"  {s.id} [{s.kind}] {escape(what)} {escape(s.target)}{escape(extra)}")
        for sub in plan.subtasks:
            key = f"{plan.plan_id}/{hash(plan.plan_json)}/{sub.subtask.id}"  # a replan runs its subtasks anew
            now = (sub.state, sub.message)
            if shown.get(key) != now and sub.state != 0:
                shown[key] = now
                console.print(f"  {sub.subtask.id} {subtask_state_name(sub.state)}: {escape(sub.message)}")

    from carryon_common.core import names
    from carryon_interfaces.msg import ShieldEvent

    decisions = {ShieldEvent.DECISION_RELEASED_PREFIX: "prefix", ShieldEvent.DECISION_RETREAT: "retreat",
                 ShieldEvent.DECISION_REJECTED_STALE: "stale", ShieldEvent.DECISION_REJECTED_NO_PERCEPTION:
                 "no perception", ShieldEvent.DECISION_REJECTED_ESTOP: "e-stop",
                 ShieldEvent.DECISION_REJECTED_INVALID: "invalid"}  # fmt: skip
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
            console.print(f"  [yellow]shield[/] {event.subtask_id}: {label}, released {event.released_steps}/"
                          f"{event.total_steps}: {escape(event.reason)}")  # fmt: skip

    console.print(f"[bold]{escape(args.user)}:[/] {escape(args.text)}")
    with GraphClient(_namespace(args), args.timeout) as client:
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


def cmd_perturb(args: argparse.Namespace) -> int:
    from geometry_msgs.msg import Vector3

    from carryon_bringup.node import GraphClient
    from carryon_interfaces.srv import SimPerturb

    dx, dy, dz = args.by
    kind = getattr(SimPerturb.Request, f"KIND_{args.kind.upper()}")  # the choices are the message's kinds
    request = SimPerturb.Request(kind=kind, object=args.object, location=args.location,
                                 displacement=Vector3(x=dx, y=dy, z=dz))  # fmt: skip
    with GraphClient(_namespace(args), args.timeout) as client:
        if args.when_lifted:
            client.prepare_perturb()  # sent the moment the object is lifted, not after a discovery
            console.print(f"waiting until {args.when_lifted} is lifted by {args.lift_m:.2f} m ...")
            near = (args.near[0], float(args.near[1])) if args.near else None
            try:
                x, y, z = client.wait_until_lifted(args.when_lifted, args.lift_m, args.wait_timeout, near)
            except TimeoutError as exc:
                err.print(str(exc))
                return EXIT_FAILED
            console.print(f"{args.when_lifted} held at ({x:.3f}, {y:.3f}, {z:.3f}) m")
        response = client.perturb(request)
    code = _service_outcome(response.status, response.message)
    if code == EXIT_OK:
        console.print(f"perturbation: {response.message}")
    return code


def cmd_replay(args: argparse.Namespace) -> int:
    from carryon_bringup.replay import replay

    bag = Path(args.bag)
    if not (bag / "metadata.yaml").is_file():
        err.print(f"{bag}: not a rosbag2 folder (no metadata.yaml)")
        return EXIT_USAGE
    if args.rate <= 0 or (args.no_ros and not args.foxglove_port):
        err.print("--rate must be > 0, and --no-ros needs --foxglove-port")
        return EXIT_USAGE
    shown = {"t": -1.0}

    def progress(count: int, seconds: float) -> None:
        if seconds - shown["t"] >= 5.0:
            shown["t"] = seconds
            console.print(f"  {seconds:6.1f} s of the run, {count} messages")

    sent = replay(bag, rate=args.rate, prefix=args.prefix, topics=set(args.topic) or None, ros=not args.no_ros,
                  foxglove_port=args.foxglove_port, progress=progress)  # fmt: skip
    console.print(f"replayed {sent} messages")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from carryon_bringup.report import write_report

    run_dir = Path(args.run_dir)
    if not (run_dir / "bag").is_dir() and not (run_dir / "audit.jsonl").is_file():
        err.print(f"{run_dir}: no bag/ or audit.jsonl (was recorder_node running?)")
        return EXIT_USAGE
    figures = write_report(run_dir)
    console.print(f"{figures['outcome']}: {figures['outcome_message']}")
    console.print(f"wrote {run_dir / 'report.md'}, report.png, metrics.json")
    return EXIT_OK


def _print_memory_changes(changes: Sequence[Any]) -> None:
    """A table of MemoryChange messages (newest first, as the service returns them)."""
    from rich.markup import escape

    table = Table(title="memory history (newest first)")
    for column in ("version", "time", "file"):
        table.add_column(column, no_wrap=True)
    for column in ("what", "change", "source"):
        table.add_column(column, overflow="fold")
    for c in changes:
        stamp = dt.datetime.fromtimestamp(c.stamp.sec + c.stamp.nanosec * 1e-9).strftime("%m-%d %H:%M:%S")
        what = f"{c.entity}.{c.key}" if c.key else "(whole file)"
        change = f"{c.previous_value or '(none)'} -> {c.new_value or '(removed)'}" if c.key else ""
        table.add_row(str(c.version), stamp, escape(c.file), escape(what), escape(change), escape(c.source))
    console.print(table)


def cmd_memory(args: argparse.Namespace) -> int:
    from carryon_bringup.node import GraphClient

    if args.memory_command == "history" and args.limit < 0:
        err.print("--limit: must be >= 0")
        return EXIT_USAGE
    if args.memory_command == "restore" and args.version < 1:
        err.print("VERSION: must be >= 1 (see `carryon memory history`)")
        return EXIT_USAGE
    with GraphClient(_namespace(args), args.timeout) as client:
        if args.memory_command == "set":
            response = client.memory_set(args.user, args.entity, args.key, args.value, args.source)
        elif args.memory_command == "remember-image":
            path = Path(args.file)
            kind = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg"}.get(path.suffix.lower())
            if kind is None or not path.is_file():
                err.print(f"{path}: not a .png / .jpg file")
                return EXIT_USAGE
            response = client.remember_image(args.user, args.entity, args.key, image=(kind, path.read_bytes()),
                                             source=args.source)  # fmt: skip
        elif args.memory_command == "history":
            response = client.memory_history(args.file, args.limit)
        elif args.memory_command == "restore":
            response = client.memory_history("", 10, restore_version=args.version)
        else:
            response = client.memory_context(args.user)
    code = _service_outcome(response.status, response.message)
    if code != EXIT_OK:
        return code
    if args.memory_command == "show":
        console.print(response.rendered, end="", markup=False)
        err.print(response.message, markup=False)  # sizes on stderr: stdout stays the context alone
    elif args.memory_command == "history":
        _print_memory_changes(response.changes)
        console.print(response.message, markup=False)
    else:
        console.print(response.message, markup=False)
    return code


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

    with GraphClient(_namespace(args), args.timeout) as client:
        if args.target or args.source or args.destination:
            task = client.set_task(args.subtask, args.target, args.source, args.destination)
            if task.status != task.STATUS_OK:
                return _service_outcome(task.status, f"shield/set_task: {task.message}")
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


def cmd_estop(args: argparse.Namespace) -> int:
    from carryon_bringup.node import GraphClient

    with GraphClient(_namespace(args), args.timeout) as client:
        response = client.set_estop(not args.release, args.reason)
    code = _service_outcome(response.status, response.message)
    if code == EXIT_OK:
        console.print(f"{response.message} (source {response.state.source}: {response.state.reason})")
    return code


def cmd_bench(args: argparse.Namespace) -> int:
    from carryon_bringup.bench import BENCHMARKS
    from carryon_bringup.core.bench import BenchOptions

    if args.list or not args.name:
        table = Table(title="benchmarks")
        table.add_column("name")
        table.add_column("what")
        table.add_column("available")
        for name in BENCHMARKS:
            bench = BENCHMARKS.get(name)
            table.add_row(name, bench.description, "yes" if bench.run else f"issue #{bench.issue}")
        console.print(table)
        return EXIT_OK if args.list else EXIT_USAGE
    bench = BENCHMARKS.get(args.name)
    if bench.run is None:
        err.print(f"benchmark {args.name!r} is not implemented yet (issue #{bench.issue}): {bench.description}")
        return EXIT_NOT_IMPLEMENTED
    run_dir = Path("runs") / f"bench-{args.name}-{dt.datetime.now():%Y%m%d-%H%M%S}"
    if args.resume:
        run_dir = Path(args.resume)
        if not run_dir.is_dir():
            err.print(f"--resume: {run_dir} is not a folder of an earlier run")
            return EXIT_USAGE
    config_dir = Path(args.config_dir) if args.config_dir else None
    options = BenchOptions(args.quick, args.seed, run_dir, tuple(args.set), config_dir)
    result = bench.run(options)
    table = Table(title=f"carryon bench {args.name}{' --quick' if args.quick else ''} (seed {args.seed})")
    for column in ("metric", "value", "unit", "note"):
        table.add_column(column)
    for m in result.metrics:
        table.add_row(m.name, f"{m.value:.4g}", m.unit, m.note)
    console.print(table)
    result.write(run_dir / "results.json")
    (run_dir / "results.md").write_text(result.to_markdown(), encoding="utf-8")
    if args.json:
        result.write(Path(args.json))
    console.print(f"results: {run_dir / 'results.json'}" + (f" and {args.json}" if args.json else ""))
    return EXIT_OK


def _terminated(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C: goals cancelled, graphs a command started stopped


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    on_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if on_main_thread else None  # `up` sets its own
    try:
        return _dispatch(args)
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _dispatch(args: argparse.Namespace) -> int:
    # Common options given neither before nor after the command (argparse.SUPPRESS).
    args.config_dir = getattr(args, "config_dir", None)
    args.timeout = getattr(args, "timeout", DEFAULT_TIMEOUT_S)
    try:
        if args.command == "up":
            from carryon_bringup.up import run_up

            return run_up(
                profile=args.profile, only=args.only, config_dir=args.config_dir, sets=args.set, run_dir=args.run_dir,
                log_level=args.log_level, ready_timeout_s=args.ready_timeout, stop_timeout_s=args.stop_timeout,
            )  # fmt: skip
        handler = {
            "status": cmd_status, "ask": cmd_ask, "assist": cmd_assist, "memory": cmd_memory, "policy": cmd_policy,
            "perturb": cmd_perturb, "report": cmd_report, "replay": cmd_replay,
            "estop": cmd_estop, "bench": cmd_bench, "reflect": cmd_reflect, "audit": cmd_audit,
        }  # fmt: skip
        return handler[args.command](args)
    except KeyboardInterrupt:
        return 130
    except CarryOnError as exc:
        from carryon_common.calls import GraphUnreachable

        err.print(f"error: {exc}")
        if isinstance(exc, GraphUnreachable):
            err.print("is the graph running? Start it with `carryon up` (same ROS_DOMAIN_ID in both shells).")
            return EXIT_UNREACHABLE
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
