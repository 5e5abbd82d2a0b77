"""The learned policy alone on seeded episodes of the food scene without obstacles: task
success from simulator truth (evaluation only; the policy reads pixels and its own state,
never the truth), and inference time per chunk.

Episodes are those the demonstrations were drawn from (layout.episode_scene), with seeds
the recorder never uses (layout.EVAL_SEED_BASE + ...), under the scene's own lighting; the
loop is policy_node's (steps_per_inference 8 of a 16-step chunk, 20 Hz), no shield. One
JSON line per episode goes to `--rows` as it finishes, so an interrupted run resumes.

    python -m carryon_sim.harness.learned.evaluate --checkpoint DIR --rows FILE [--episodes 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from carryon_sim.core.world import World
from carryon_sim.harness.episodes import Task, run_episode
from carryon_sim.harness.learned import layout
from carryon_sim.harness.learned.record import STEPS_PER_INFERENCE, TASKS
from carryon_sim.harness.stand_in import stand_in_script

MAX_STEPS = 400  # 20 s at 20 Hz; the expert needs ~110 (cover) to ~165 (carrot)


def episode_seed(seed: int, index: int) -> int:
    return layout.EVAL_SEED_BASE + seed * 100_000 + index


def play(policy: Any, instruction: str, seed: int) -> dict[str, Any]:
    """One episode of `policy` on `instruction`: success, steps, inference times, contacts."""
    world = World(layout.episode_scene(seed), seed=seed)
    cameras = layout.PolicyCameras(world)
    try:
        result = run_episode(
            world,
            policy,
            [Task(instruction, stand_in_script(instruction), MAX_STEPS)],
            seed,
            steps_per_inference=STEPS_PER_INFERENCE,
            cameras=cameras,
            setup=TASKS[instruction].setup,
        )
    finally:
        cameras.close()
    return {
        "instruction": instruction,
        "seed": seed,
        "success": result.success,
        "steps": result.steps,
        "infer_s": [round(s, 5) for s in result.infer_s],
        "violations": [str(v) for v in result.violations],
        "displaced": result.displaced,
    }


def evaluate(
    checkpoint: Path,
    rows: Path,
    episodes: int,
    seed: int,
    tasks: Sequence[str] = tuple(TASKS),
    *,
    threads: int = 1,
    progress: Callable[[str], None] = lambda _line: None,
) -> list[dict[str, Any]]:
    """`episodes` episodes per task; rows already in `rows` are kept (a resumed run)."""
    from carryon_policy.core.lerobot_policy import _import_lerobot, make_lerobot_policy

    torch, _, _ = _import_lerobot()
    torch.set_num_threads(threads)
    done: dict[tuple[str, int], dict[str, Any]] = {}
    if rows.is_file():
        for line in rows.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            done[(row["instruction"], row["seed"])] = row
    policy = make_lerobot_policy(layout.policy_config(checkpoint))
    rows.parent.mkdir(parents=True, exist_ok=True)
    out = []
    try:
        with rows.open("a", encoding="utf-8") as sink:
            for instruction in tasks:
                for index in range(episodes):
                    key = (instruction, episode_seed(seed, index))
                    if key not in done:
                        done[key] = play(policy, instruction, key[1])
                        sink.write(json.dumps(done[key]) + "\n")
                        sink.flush()
                    out.append(done[key])
                    wins = sum(r["success"] for r in out if r["instruction"] == instruction)
                    progress(f"{instruction!r}: {index + 1}/{episodes}, {wins} succeeded")
    finally:
        policy.close()
    return out


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Success rate per task, inference time per chunk (p50 / p99, seconds)."""
    per_task: dict[str, Any] = {}
    for instruction in dict.fromkeys(r["instruction"] for r in rows):
        mine = [r for r in rows if r["instruction"] == instruction]
        wins = sum(r["success"] for r in mine)
        per_task[instruction] = {
            "episodes": len(mine),
            "succeeded": wins,
            "success_rate": wins / len(mine),
            "with_contact_violation": sum(bool(r["violations"]) for r in mine),
        }
    infer = [s for r in rows for s in r["infer_s"]]
    return {
        "tasks": per_task,
        "infer_s_p50": float(np.percentile(infer, 50)) if infer else None,
        "infer_s_p99": float(np.percentile(infer, 99)) if infer else None,
        "chunks": len(infer),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="the trained policy folder (train.py)")
    parser.add_argument("--rows", type=Path, required=True, help="JSON lines, one per episode (appended; resumes)")
    parser.add_argument("--episodes", type=int, default=100, help="episodes per task (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes (default 0)")
    parser.add_argument("--task", action="append", choices=sorted(TASKS), help="only these tasks (repeatable)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args(argv)
    rows = evaluate(
        args.checkpoint,
        args.rows,
        args.episodes,
        args.seed,
        args.task or tuple(TASKS),
        threads=args.threads,
        progress=lambda line: print(line, file=sys.stderr),
    )
    print(json.dumps(summary(rows), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
