"""`carryon memory show|set|remember-image|history|restore`: user and scene memory via memory_node;
`carryon memory repair` works on the memory folder itself (cli/memory_repair.py)."""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from carryon_bringup.cli.common import EXIT_OK, EXIT_USAGE, Subparsers, console, err, namespace, service_outcome
from carryon_bringup.cli.memory_repair import add_repair
from carryon_common.convert import time_from_msg

READ_ONLY_HINT = (
    "a memory file with malformed lines is read-only and those lines are left out: `carryon status -v` lists "
    "them; `carryon memory repair --all --dry-run` shows how a repair would fix them (nothing is lost), "
    "`carryon memory repair --all` applies it"
)


def add_memory(sub: Subparsers, common: argparse.ArgumentParser) -> None:
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
    add_repair(memory_sub, common)  # sets its own handler
    memory.set_defaults(handler=cmd_memory)


def _print_memory_changes(changes: Sequence[Any]) -> None:
    """A table of MemoryChange messages (newest first, as the service returns them)."""
    from rich.markup import escape

    table = Table(title="memory history (newest first)")
    for column in ("version", "time", "file"):
        table.add_column(column, no_wrap=True)
    for column in ("what", "change", "source"):
        table.add_column(column, overflow="fold")
    for c in changes:
        stamp = dt.datetime.fromtimestamp(time_from_msg(c.stamp)).strftime("%m-%d %H:%M:%S")
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
    with GraphClient(namespace(args), args.timeout) as client:
        if args.memory_command == "set":
            response = client.memory_set(args.user, args.entity, args.key, args.value, args.source)
        elif args.memory_command == "remember-image":
            path = Path(args.file)
            kind = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg"}.get(path.suffix.lower())
            if kind is None or not path.is_file():
                err.print(f"{path}: not a .png / .jpg file")
                return EXIT_USAGE
            response = client.remember_image(
                args.user, args.entity, args.key, image=(kind, path.read_bytes()), source=args.source
            )
        elif args.memory_command == "history":
            response = client.memory_history(args.file, args.limit)
        elif args.memory_command == "restore":
            response = client.memory_history("", 10, restore_version=args.version)
        else:
            response = client.memory_context(args.user)
    code = service_outcome(response.status, response.message)
    if code != EXIT_OK:
        return code
    if args.memory_command == "show":
        console.print(response.rendered, end="", markup=False)
        err.print(response.message, markup=False)  # sizes on stderr: stdout stays the context alone
        if "malformed line" in response.message:  # memory_node's note on lines left out of a read-only file
            err.print(READ_ONLY_HINT, markup=False)
    elif args.memory_command == "history":
        _print_memory_changes(response.changes)
        console.print(response.message, markup=False)
    else:
        console.print(response.message, markup=False)
    return code
