"""`carryon`: the operator CLI — what a console would do with `ros2 service call`.

Exit codes: 0 success; 1 request failed or graph not (fully) ready; 2 usage or
configuration error; 3 graph unreachable (nothing answered within the timeout);
4 the answering node does not implement the request yet.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence

from carryon_bringup.cli import assist, catalog, graph, memory, policy, reflect, runs, sim
from carryon_bringup.cli.common import DEFAULT_TIMEOUT_S, EXIT_UNREACHABLE, EXIT_USAGE, err
from carryon_bringup.cli.extensions import extension, others
from carryon_common.core.errors import CarryOnError

# In the order `carryon --help` lists the commands; each adds its subparser with a `handler` default.
# `extension(name)`: a command another package adds (cli/extensions.py), such as carryon_bench's.
COMMANDS = (
    graph.add_up,
    graph.add_status,
    assist.add_ask,
    assist.add_assist,
    sim.add_perturb,
    runs.add_replay,
    runs.add_report,
    memory.add_memory,
    catalog.add_catalog,
    policy.add_policy,
    graph.add_estop,
    graph.add_keys,
    extension("bench"),
    runs.add_audit,
    reflect.add_reflect,
)


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
    for add in COMMANDS:
        add(sub, common)
    for add in others(placed=set(sub.choices)):
        add(sub, common)
    return parser


def _terminated(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C: goals cancelled, graphs a command started stopped


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "takes_any_arguments", False):  # only a missing extension's stand-in
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
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
        return int(args.handler(args))
    except KeyboardInterrupt:
        return 130
    except CarryOnError as exc:
        from carryon_common.calls import GoalLost, GraphUnreachable

        err.print(f"error: {exc}")
        if isinstance(exc, GoalLost):
            err.print("`carryon status` shows which nodes are up.")
            return EXIT_UNREACHABLE
        if isinstance(exc, GraphUnreachable):
            err.print("is the graph running? Start it with `carryon up` (same ROS_DOMAIN_ID in both shells).")
            return EXIT_UNREACHABLE
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
