"""What every `carryon` command shares: exit codes, the consoles, graph look-up and service outcomes."""

from __future__ import annotations

import argparse
from typing import TypeAlias

from rich.console import Console

from carryon_common.core.status import ServiceStatus

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_NOT_IMPLEMENTED = 4

DEFAULT_TIMEOUT_S = 10.0  # a new process discovers 8 nodes over DDS; 5 s was short on a loaded 2-core machine

console = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def namespace(args: argparse.Namespace) -> str:
    """The graph's namespace from graph.yaml in `--config-dir`."""
    from carryon_bringup.up import load_spec

    return load_spec(args.config_dir).namespace


def service_outcome(status: int, message: str) -> int:
    """Exit code of a service response's ServiceStatus; prints the reason of a failure on stderr."""
    if status == ServiceStatus.OK:
        return EXIT_OK
    try:
        label = ServiceStatus(status).label
    except ValueError:
        label = f"status {status}"
    err.print(f"[bold]{label}[/]: {message}")
    return EXIT_NOT_IMPLEMENTED if status == ServiceStatus.NOT_IMPLEMENTED else EXIT_FAILED


# What `main` hands each command module to add its subcommands to.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # argparse has no public name for it
