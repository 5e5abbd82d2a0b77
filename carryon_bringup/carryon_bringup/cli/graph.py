"""`carryon up`, `carryon status`, `carryon estop`: start the graph, ask it how it is, stop the arm."""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from carryon_bringup.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    Subparsers,
    console,
    err,
    namespace,
    service_outcome,
)
from carryon_common.core.status import NodeHealth, NodeState


def add_up(sub: Subparsers, common: argparse.ArgumentParser) -> None:
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
    up.add_argument(
        "--insecure",
        action="store_true",
        help="run without keys on purpose: nothing is signed or checked, and every node says INSECURE "
        "(the robot profile refuses to start without its keys otherwise; docs/security.md)",
    )
    up.set_defaults(handler=cmd_up)


def add_status(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    status = sub.add_parser("status", parents=[common], help="which nodes are up and ready, with their capabilities")
    status.add_argument(
        "--profile",
        help="profile whose nodes to query (default: $CARRYON_PROFILE, else the one whose nodes are running, "
        "else graph.yaml's default_profile)",
    )
    status.add_argument("--json", action="store_true", help="print machine-readable JSON")
    status.add_argument("-v", "--verbose", action="store_true", help="list every capability")
    status.set_defaults(handler=cmd_status)


def add_estop(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    estop = sub.add_parser("estop", parents=[common], help="engage (or --release) the emergency stop")
    estop.add_argument("--release", action="store_true", help="release instead of engage")
    estop.add_argument("--reason", default="operator CLI", help="recorded with the state change")
    estop.set_defaults(handler=cmd_estop)


def cmd_up(args: argparse.Namespace) -> int:
    from carryon_bringup.up import run_up

    return run_up(
        profile=args.profile,
        only=args.only,
        config_dir=args.config_dir,
        sets=args.set,
        run_dir=args.run_dir,
        log_level=args.log_level,
        ready_timeout_s=args.ready_timeout,
        stop_timeout_s=args.stop_timeout,
        insecure=args.insecure,
    )


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
        "profile": h.profile,
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
        color = "green" if h.state == NodeState.READY else "yellow" if h.ready else "red"
        done = sum(c.implemented for c in h.capabilities)
        row = (h.state.name.lower(), str(h.pid), f"{h.uptime_s:.0f}s", " ".join(h.backends))
        table.add_row(name, f"[{color}]{row[0]}[/]", *row[1:], f"{done}/{len(h.capabilities)}")
    console.print(table)
    for name, h in health.items():  # what stops a node from doing its job, in its own words
        if h is not None and h.state in (NodeState.DEGRADED, NodeState.ERROR):
            console.print(f"  [yellow]{name}[/] {h.state.name.lower()}: {escape(h.message)}")
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


def security_summary(health: dict[str, NodeHealth | None]) -> tuple[bool, str]:
    """(secured, one line): whether every node that signs or checks commands and operator
    requests does so, from the `commands=` and `operators=` backends the nodes report,
    whether the audit verifies who decided (`decisions=`, when a recorder runs), which nodes
    run without keys on purpose (`security=INSECURE`) and which refuse doubly published
    sensor inputs (`inputs=`)."""
    parts, secured = [], True
    for role, what in (("commands", "command path"), ("operators", "operator requests"), ("decisions", "audit")):
        roles = {
            name: backend.split("=", 1)[1]
            for name, h in health.items()
            if h is not None
            for backend in h.backends
            if backend.startswith(f"{role}=")
        }
        weak = sorted(name for name, value in roles.items() if "NOT" in value)
        secured = secured and (bool(roles) or role == "decisions") and not weak
        if not roles and role == "decisions":
            continue  # no recorder in this graph: nothing is audited
        if not roles:
            parts.append(f"{what}: no node reports it")
        elif weak:
            parts.append(f"{what}: NOT authenticated at {', '.join(weak)}")
        else:
            parts.append(f"{what}: authenticated ({', '.join(sorted(roles))})")
    insecure = sorted(
        name
        for name, h in health.items()
        if h is not None and any(b.startswith("security=INSECURE") for b in h.backends)
    )
    if insecure:  # started without keys on purpose (--insecure, security: insecure)
        secured = False
        parts.insert(0, f"INSECURE on purpose at {', '.join(insecure)}")
    inputs = sorted(
        name for name, h in health.items() if h is not None and any(b.startswith("inputs=") for b in h.backends)
    )
    if inputs:
        parts.append(f"sensor inputs: one publisher each or fail closed ({', '.join(inputs)})")
    if os.environ.get("ROS_SECURITY_ENABLE", "").lower() == "true":
        parts.append("DDS security (SROS2): ROS_SECURITY_ENABLE=true in this shell")
    else:
        parts.append("DDS security (SROS2): off (the PyPI ROS 2 build has none; docs/security.md)")
    return secured, ("secured: " if secured else "NOT secured: ") + "; ".join(parts)


def _running_profile(spec: Any, client: Any, timeout_s: float) -> tuple[str | None, dict[str, Any], float]:
    """The profile the running nodes report they were started in (the launchers tell each
    node), else the one whose nodes are seen (nodes started some other way); with the
    answers of the nodes asked, and the seconds of discovery spent when none was seen."""
    profiles = {p: {launch.name for launch in spec.launches(p) if not launch.when} for p in spec.profiles}
    ours = set().union(*profiles.values())
    started = time.monotonic()
    seen = client.running_nodes(profiles.values(), wait_s=min(2.0, timeout_s))
    # A busy machine's discovery can show no node for longer (a CI run's status saw none in 2 s
    # and reported the default profile while the robot profile ran): wait on, within the
    # timeout, for one node to ask; its answer names the profile.
    while not seen & ours and time.monotonic() - started < timeout_s:
        seen = client.running_nodes(profiles.values(), wait_s=min(0.5, timeout_s - (time.monotonic() - started)))
    known = sorted(seen & ours)
    answered = client.statuses(known) if known else {}  # nothing runs: no waiting on nobody
    reported = {h.profile for h in answered.values() if h is not None and h.profile in profiles}
    waited = 0.0 if seen else time.monotonic() - started
    if len(reported) == 1:  # discovery may not show every node yet on a busy machine; their word is enough
        return reported.pop(), answered, waited
    return spec.running_profile(seen), answered, waited


def cmd_status(args: argparse.Namespace) -> int:
    from carryon_bringup.node import GraphClient
    from carryon_bringup.up import load_spec
    from carryon_common.core.names import PROFILE_ENV

    spec = load_spec(args.config_dir)
    with GraphClient(spec.namespace, args.timeout) as client:
        found, answered, waited = "", {}, 0.0
        if args.profile is None and not os.environ.get(PROFILE_ENV):  # the profile that runs, if one does
            args.profile, answered, waited = _running_profile(spec, client, args.timeout)
            found = ", found running" if args.profile else ""
        args.profile = spec.resolve_profile(args.profile)
        launches = spec.launches(args.profile)
        health = {launch.name: answered.get(launch.name) for launch in launches if not launch.when}
        # --timeout bounds the whole wait: discovery that saw no node has spent part of it
        # (status without a graph took 4.2 s with --timeout 1 on a loaded CI machine).
        unasked = [name for name, h in health.items() if h is None]
        health.update(client.statuses(unasked, wait_s=max(0.0, args.timeout - waited)))
        # Nodes started only for another node's setting (llm_server_node): shown when they run.
        # Discovery gets a moment to see them (the others may have answered before it saw one:
        # the local CI run's status left out a running llm_server_node); done once all are seen.
        conditional = [launch.name for launch in launches if launch.when]
        graph_up = any(h is not None for h in health.values())  # no graph: nothing to wait for
        seen = client.running_nodes([conditional], wait_s=min(args.timeout, 3.0)) if conditional and graph_up else set()
        optional = [name for name in conditional if name in seen]
        health.update(client.statuses(optional) if optional else {})
        mismatches = client.qos_mismatches() if not args.json else []
    if args.json:
        print(json.dumps({name: _health_json(h) for name, h in health.items()}, indent=2))
    else:
        _print_status_table(f"CarryOn graph /{spec.namespace} (profile {args.profile}{found})", health, args.verbose)
        if any(h is not None for h in health.values()):
            secured, line = security_summary(health)
            console.print(f"[{'green' if secured else 'yellow'}]{line}[/]", highlight=False)
            for mismatch in mismatches:  # DDS connects none of these: the subscriber gets nothing
                console.print(f"[yellow]incompatible QoS, nothing delivered:[/] {mismatch}", highlight=False)
    if all(h is None for h in health.values()):
        domain = os.environ.get("ROS_DOMAIN_ID", "0")
        err.print(
            f"no CarryOn node answered within {args.timeout:.0f} s (ROS_DOMAIN_ID={domain}); "
            "is the graph running? Start it with `carryon up`."
        )
        return EXIT_UNREACHABLE
    return EXIT_OK if all(h is not None and h.ready for h in health.values()) else EXIT_FAILED


def add_keys(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    keys = sub.add_parser("keys", parents=[common], help="the keys of a robot PC and operator identities")
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    init = actions.add_parser(
        "init",
        parents=[common],
        help="make the keys a profile with installed keys (robot) starts with: command key, node keys, "
        "authorized principals (docs/security.md)",
    )
    init.add_argument(
        "--dir", default="", help="where ($CARRYON_KEYS_DIR, else ~/.config/carryon); files that exist are kept"
    )
    init.set_defaults(handler=cmd_keys_init)
    operator = actions.add_parser(
        "operator", parents=[common], help="make (or show) this login's operator identity and its authorized line"
    )
    operator.add_argument("--name", default="", help="operator name (default $CARRYON_OPERATOR or the login name)")
    operator.set_defaults(handler=cmd_keys_operator)


def cmd_keys_init(args: argparse.Namespace) -> int:
    from carryon_bringup.core.run_keys import installed_keys_dir, make_keys, signers
    from carryon_bringup.up import load_spec
    from carryon_common.core.command_auth import load_key

    spec = load_spec(args.config_dir)
    folder = Path(args.dir).expanduser() if args.dir else installed_keys_dir()
    installed = [p for p in spec.profiles if spec.profile(p).keys == "installed"] or spec.profiles
    classes = {name: cls for profile in installed for name, cls in spec.config_classes(profile).items()}
    existed = {path for path in folder.rglob("*") if path.is_file()} if folder.exists() else set()
    made = make_keys(folder, signers(classes))
    load_key(made[0])  # a kept command key must be usable too (owner-only, long enough): ConfigError says why
    for path in made:
        console.print(f"{'kept' if path in existed else 'made'} {path}")
    where = f" with CARRYON_KEYS_DIR={folder}" if args.dir else ""
    console.print(
        f"the robot profile's nodes take these by themselves{where}; "
        "add other operators' lines (`carryon keys operator` on their console, then users=<who they act for>) to "
        f"{folder / 'authorized_principals'} (docs/security.md)"
    )
    return EXIT_OK


def cmd_keys_operator(args: argparse.Namespace) -> int:
    from carryon_common.core.operator_auth import (
        authorized_operators_path,
        create_identity,
        default_operator,
        load_identity,
        operator_key_path,
    )

    name = args.name or default_operator()
    path = operator_key_path(args.name)
    existed = path.exists()
    identity = load_identity(create_identity(path), f"operator:{name}")
    console.print(f"{'kept the existing' if existed else 'made a new'} operator identity {identity.principal}: {path}")
    console.print(
        "authorize it on a robot PC by adding this line to its authorized_principals file (or "
        f"{authorized_operators_path()} for local runs); add users=<user,user,...> (or users=*) to it: without, the "
        "operator may act for no user's memory or requests"
    )
    print(identity.public_line())
    return EXIT_OK


def cmd_estop(args: argparse.Namespace) -> int:
    from carryon_bringup.node import GraphClient

    with GraphClient(namespace(args), args.timeout) as client:
        if not args.release:
            return _report_engaged(client.engage_estop(args.reason), args.timeout)
        response = client.set_estop(False, args.reason)
    code = service_outcome(response.status, response.message)
    if code == EXIT_OK:
        console.print(f"{response.message} (source {response.state.source}: {response.state.reason})")
    return code


def _report_engaged(answers: Mapping[str, Any], timeout_s: float) -> int:
    """One line per place the e-stop was engaged (shield, driver); success when either engaged."""
    engaged = False
    for where, response in answers.items():
        if response is None:
            err.print(f"{where}: no answer within {timeout_s:.0f} s")
        elif response.status == 0:
            engaged = True
            console.print(f"{where}: {response.message}")
        else:
            err.print(f"{where}: {response.message}")
    if not engaged:
        err.print("the emergency stop was engaged nowhere: is the graph running? Start it with `carryon up`.")
        return EXIT_UNREACHABLE
    return EXIT_OK
