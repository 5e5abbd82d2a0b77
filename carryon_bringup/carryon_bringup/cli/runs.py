"""`carryon replay`, `carryon report`, `carryon audit`: what to do with a recorded run folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from carryon_bringup.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Subparsers, console, err


def add_replay(sub: Subparsers, _common: argparse.ArgumentParser) -> None:
    replay_p = sub.add_parser("replay", help="play a recorded run (bag/) back into ROS for rviz, and/or to Foxglove")
    replay_p.add_argument("bag", help="a bag folder, e.g. runs/<time>-demo/bag")
    replay_p.add_argument("--rate", type=float, default=1.0, help="speed factor (default 1.0)")
    replay_p.add_argument("--prefix", default="", help="publish under this namespace, e.g. /replay")
    replay_p.add_argument("--topic", action="append", default=[], help="only this recorded topic (repeatable)")
    replay_p.add_argument("--foxglove-port", type=int, default=0, help="also serve it live to Foxglove on this port")
    replay_p.add_argument("--no-ros", action="store_true", help="Foxglove only: do not publish into ROS")
    replay_p.set_defaults(handler=cmd_replay)


def add_report(sub: Subparsers, _common: argparse.ArgumentParser) -> None:
    report = sub.add_parser("report", help="write a run folder's report: metrics.json, report.png, report.md")
    report.add_argument("run_dir", help="a run folder of carryon up / make demo (with bag/ and audit.jsonl)")
    report.add_argument(
        "--animation",
        action="store_true",
        help="also write animation.gif: the run from its recorded scene camera (else rendered from its joint "
        "states), with the active subtask's instruction, the shield's decisions and the sim time on each frame",
    )
    report.set_defaults(handler=cmd_report)


def add_audit(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    audit = sub.add_parser("audit", parents=[common], help="the tamper-evident decision log of a run")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    averify = audit_sub.add_parser("verify", parents=[common], help="check every line's hash and link")
    averify.add_argument("file", help="e.g. runs/<run>/audit.jsonl")
    averify.add_argument("--last", default="", help="the hash the chain must end with (detects cut-off lines)")
    averify.add_argument(
        "--key",
        default="~/.local/state/carryon/audit.key",
        help="the audit key: every entry's MAC must verify (default: recorder_node's; '' = the hash chain only)",
    )
    audit.set_defaults(handler=cmd_audit)


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

    sent = replay(
        bag,
        rate=args.rate,
        prefix=args.prefix,
        topics=set(args.topic) or None,
        ros=not args.no_ros,
        foxglove_port=args.foxglove_port,
        progress=progress,
    )
    console.print(f"replayed {sent} messages")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from carryon_bringup.report import violation_lines, write_report

    run_dir = Path(args.run_dir)
    if not (run_dir / "bag").is_dir() and not (run_dir / "audit.jsonl").is_file():
        err.print(f"{run_dir}: no bag/ or audit.jsonl (was recorder_node running?)")
        return EXIT_USAGE
    if args.animation:
        from carryon_bringup.report_animation import write_animation

        if not (run_dir / "bag").is_dir():
            err.print(f"{run_dir}: no bag/ to make an animation from")
            return EXIT_USAGE
        made = write_animation(run_dir)
        console.print(
            f"wrote {made.path}: {made.frames} frames at {made.fps:g} fps from the {made.source} images, "
            f"{made.bytes / 1e6:.2f} MB (image scale {made.scale:g})"
        )
    figures = write_report(run_dir)
    console.print(f"{figures['outcome']}: {figures['outcome_message']}")
    console.print(f"unpermitted contacts (simulator): {figures['unpermitted_contacts']}", markup=False)
    for line in violation_lines(figures):
        console.print(f"  {line}", markup=False)
    console.print(f"wrote {run_dir / 'report.md'}, report.png, metrics.json")
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    from carryon_common.core.audit import verify
    from carryon_common.core.command_auth import load_key

    key_file = Path(args.key).expanduser() if args.key else None
    key = load_key(key_file) if key_file is not None and key_file.exists() else None
    check = verify(Path(args.file), expect_last=args.last, key=key)
    if check.ok:
        keyed = f"every MAC verified ({key_file})" if check.keyed else "MACs NOT checked (no audit key)"
        console.print(f"{args.file}: {check.entries} entries, chain intact, {keyed}; last hash {check.last_hash}")
        return EXIT_OK
    err.print(f"{args.file}: BROKEN after {check.entries} good entries: {check.problem}")
    if check.entries == 0 and "no MAC" in check.problem:
        err.print(
            "(its first entry has no MAC: either the run was recorded without an audit key "
            "(recorder_node.audit_key_file '') or the MACs were stripped; only the former may be checked "
            "with `--key ''`)"
        )
    return EXIT_FAILED
