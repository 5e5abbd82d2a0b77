"""`carryon memory repair`: make read-only memory files writable again, losing nothing.

Works on the memory folder itself, so it needs no graph: through the memory store, under
its cross-process write lock and journalled (op "repair"), like any other writer. It is
safe while memory_node runs: the node reads the repaired file at its next request and
reports it healthy at its next rescan (`rescan_period_s`). What the repair does to each
kind of problem: carryon_memory/core/repair.py and docs/memory.md.
"""

from __future__ import annotations

import argparse
import difflib
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from carryon_bringup.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Subparsers, console, err

MEMORY_DIR_HELP = (
    "the memory folder (default: memory_node's memory_dir in the config, relative to the current directory as "
    "under `carryon up`)"
)


def add_repair(actions: Subparsers, common: argparse.ArgumentParser) -> None:
    """Add `repair` to the subcommands of `carryon memory`."""
    repair = actions.add_parser(
        "repair",
        parents=[common],
        help="fix read-only memory files (duplicate sections, malformed lines) without losing a line",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = repair.add_mutually_exclusive_group(required=True)
    which.add_argument("--user", help="repair memory/users/USER.md")
    which.add_argument("--scene", action="store_true", help="repair memory/scene.md")
    which.add_argument("--all", action="store_true", help="repair every memory file")
    repair.add_argument("--dry-run", action="store_true", help="show what would change and write nothing")
    repair.add_argument("--memory-dir", default="", help=MEMORY_DIR_HELP)
    repair.add_argument("--profile", help="profile whose memory_node config to read (default as for `carryon up`)")
    repair.set_defaults(handler=cmd_repair)


def memory_dir(args: argparse.Namespace) -> Path:
    """`--memory-dir`, else memory_node's `memory_dir` of the graph's config (ConfigError when unreadable)."""
    if args.memory_dir:
        return Path(args.memory_dir).expanduser().resolve()
    from carryon_bringup.up import load_spec

    spec = load_spec(args.config_dir)
    (launch,) = spec.launches(spec.resolve_profile(args.profile), only=["memory_node"])
    return Path(launch.load_config().memory_dir).expanduser().resolve()


def cmd_repair(args: argparse.Namespace) -> int:
    from carryon_memory.core import validate
    from carryon_memory.core.errors import MemoryStoreError
    from carryon_memory.core.files import user_file
    from carryon_memory.core.repair import memory_files, plan_folder, repair
    from carryon_memory.core.scene import SCENE_FILE
    from carryon_memory.core.store import MemoryStore

    root = memory_dir(args)
    if not root.is_dir():
        err.print(f"memory folder {root} does not exist (see --memory-dir)", markup=False)
        return EXIT_USAGE
    console.print(f"memory folder {root}", markup=False)
    try:
        if args.user is not None:
            files = [user_file(validate.user_id(args.user))]
        else:
            files = [SCENE_FILE] if args.scene else memory_files(root)
        if args.dry_run:
            plans, result, others = plan_folder(root, files, time.time()), None, []
        else:
            store = MemoryStore(root)
            result = repair(store, files, time.time())
            plans = list(result.files)
            others = [p for p in store.problems() if p.file not in set(files)] if args.all else []
    except MemoryStoreError as exc:
        err.print(f"failed: {exc}", markup=False)
        return EXIT_FAILED
    for plan in plans:
        _print_plan(plan, args.dry_run)
    _print_outcome(plans, result)
    for problem in others:
        console.print(f"not repaired (not a memory file this command rewrites): {problem}", markup=False)
    return EXIT_OK


def _print_plan(plan: Any, dry_run: bool) -> None:
    from carryon_memory.core.repair import escape

    if not plan.problems:
        console.print(f"{plan.file}: no problems, left as it is", markup=False)
        return
    count = len(plan.problems)
    console.print(f"{plan.file}: read-only, {count} problem{'' if count == 1 else 's'}:", markup=False)
    for problem in plan.problems:
        console.print(f"  {escape(str(problem))}", markup=False)
    console.print(f"{plan.file}: {'would be repaired' if dry_run else 'repaired'} by:", markup=False)
    for fix in plan.fixes:
        console.print(f"  {escape(str(fix))}", markup=False)
    if dry_run:
        before, after = (data.decode("utf-8", "surrogateescape").splitlines() for data in (plan.before, plan.after))
        diff = difflib.unified_diff(before, after, f"{plan.file} (now)", f"{plan.file} (repaired)", lineterm="")
        for line in diff:
            console.print(escape(line), markup=False)


def _print_outcome(plans: Sequence[Any], result: Any) -> None:
    """The summary line; `result` is None for a dry run."""
    repaired = [plan for plan in plans if plan.changed]
    if not repaired:
        console.print("nothing to repair", markup=False)
        return
    if result is None:
        console.print(f"dry run: nothing was written ({len(repaired)} file(s) would be repaired)", markup=False)
        return
    versions = [change.version for change in result.changes if change.op == "repair"]
    shown = f"version {versions[0]}" if len(versions) == 1 else f"versions {versions[0]}-{versions[-1]}"
    edited = [change.file for change in result.changes if change.op == "edit"]
    if edited:
        shown += f"; before them, {', '.join(edited)} as found (edited by hand) became a version of its own"
    done = f"repaired {len(repaired)} file(s) ({shown}); every file now parses with no problems"
    if result.undo_version:
        console.print(f"{done}. `carryon memory restore {result.undo_version}` undoes the repair", markup=False)
    else:  # the repair is the journal's first change: there is no earlier version to restore
        kept = ", ".join(f"history/{change.before}.md" for change in result.changes if change.before)
        console.print(f"{done}. The files as they were: {kept} in the memory folder", markup=False)
