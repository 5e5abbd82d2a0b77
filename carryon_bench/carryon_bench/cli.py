"""`carryon bench`: list the benchmarks or run one, writing its figures to a run folder.

carryon_bench adds it to the `carryon` CLI through the `carryon.cli_commands` entry point
(setup.py); carryon_bringup never imports this package.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from rich.table import Table

from carryon_bringup.cli.common import EXIT_NOT_IMPLEMENTED, EXIT_OK, EXIT_USAGE, Subparsers, console, err

_COUNTED = ("safety", "recovery", "personalization", "learned")  # benchmarks whose count --episodes sets
_PARALLEL = ("safety", "recovery", "learned")  # benchmarks whose rows --jobs computes side by side


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_bench(sub: Subparsers, common: argparse.ArgumentParser) -> None:
    bench = sub.add_parser("bench", parents=[common], help="run a benchmark (see --list)")
    bench.add_argument("name", nargs="?", help="benchmark name")
    bench.add_argument("--list", action="store_true", help="list benchmarks")
    bench.add_argument("--quick", action="store_true", help="a short run (CI-sized)")
    bench.add_argument("--seed", type=int, default=0, help="random seed (recorded)")
    bench.add_argument(
        "--episodes",
        type=_positive,
        metavar="N",
        help="episodes per row (safety), per perturbation kind (recovery) or cases per suite "
        "(personalization) instead of the full count (recorded; a resumed run keeps the count it started with)",
    )
    bench.add_argument(
        "--jobs",
        type=_positive,
        default=1,
        metavar="N",
        help="rows (safety) or episodes of a round (recovery) computed at a time, each in a worker process pinned "
        "to a CPU of its own, or tasks (learned), each in a process on one torch thread (default 1: one process). "
        "The outcomes are the same (simulated time); the timings rows carry are taken with the CPUs busy",
    )
    bench.add_argument(
        "--natural",
        action="store_true",
        help="recovery: the learned policy's own failures, no injected perturbation (paper Table 5; needs "
        "`make policy`)",
    )
    bench.add_argument(
        "--learned",
        action="store_true",
        help="safety: the learned policy's rows (without / with the shield, randomised food scenes) instead of the "
        "scripted stand-ins' (needs `make policy`)",
    )
    bench.add_argument(
        "--suites",
        default="",
        metavar="NAME[,NAME]",
        help="personalization: the suite sets (personalization, generalization) or single suites to run "
        "(default: every suite of both sets)",
    )
    bench.add_argument("--json", metavar="PATH", help="also write the figures to this JSON file")
    bench.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue an interrupted run in its folder (benchmarks saving rows: safety, recovery, personalization)",
    )
    bench.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NODE.KEY=VALUE",
        help="override a node parameter for benchmarks that build a node's backend, e.g. "
        "--set planner_node.llm_backend=openai (repeatable)",
    )
    bench.set_defaults(handler=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
    from carryon_bench.benchmarks import BENCHMARKS
    from carryon_bench.core.bench import BenchOptions
    from carryon_bench.cpu import check_jobs

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
    if args.episodes is not None and args.name not in _COUNTED:
        err.print(f"--episodes: {args.name} has no episode count (benchmarks with one: {', '.join(_COUNTED)})")
        return EXIT_USAGE
    if args.jobs != 1 and args.name not in _PARALLEL:
        err.print(
            f"--jobs: {args.name} runs in one process (benchmarks with rows to share out: {', '.join(_PARALLEL)})"
        )
        return EXIT_USAGE
    if args.natural and args.name != "recovery":
        err.print("--natural: only the recovery benchmark has natural-failure rounds")
        return EXIT_USAGE
    if args.learned and args.name != "safety":
        err.print("--learned: only the safety benchmark has learned-policy rows (see also `carryon bench learned`)")
        return EXIT_USAGE
    if args.suites and args.name != "personalization":
        err.print("--suites: only the personalization benchmark has suites")
        return EXIT_USAGE
    try:
        check_jobs(args.jobs)
    except ValueError as exc:
        err.print(str(exc))
        return EXIT_USAGE
    options = BenchOptions(
        args.quick,
        args.seed,
        run_dir,
        tuple(args.set),
        config_dir,
        args.episodes,
        args.jobs,
        args.natural,
        args.learned,
        tuple(name.strip() for name in args.suites.split(",") if name.strip()),
    )
    result = bench.run(options)
    sized = (f" --episodes {args.episodes}" if args.episodes else "") + (
        f" --jobs {args.jobs}" if args.jobs > 1 else ""
    )
    sized += (" --natural" if args.natural else "") + (" --learned" if args.learned else "")
    sized += f" --suites {args.suites}" if args.suites else ""
    table = Table(title=f"carryon bench {args.name}{' --quick' if args.quick else ''}{sized} (seed {args.seed})")
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
