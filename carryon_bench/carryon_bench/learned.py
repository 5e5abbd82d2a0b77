"""`carryon bench learned`: the learned policy alone, food scene without obstacles.

The policy is a LeRobot ACT network trained on the scripted expert's demonstrations
(`scripts/learned_policy.sh all`, or `make policy`: record ~11 min, train ~46 min on 2
cores; cached under ~/.cache/carryon, never in git). Unlike the scripted stand-ins it reads
only pixels (both cameras) and its own state, through lerobot_local, the backend
policy_node serves it with. Episodes: "put the carrot in the bowl" (the cover lifted off
beforehand) and "open the pink cover" on randomised layouts it was not trained on
(carryon_sim.harness.learned.evaluate); success from simulator truth. Also reported:
inference time per chunk (one CPU thread) and how the checkpoint was trained.

torch and LeRobot live in the extra's virtualenv (.venv-lerobot), not in CarryOn's: the
episodes run there, in a child process per task (`--jobs 2`: both at once, one CPU thread
each); rows are saved as they finish (`--resume`).
`--set policy_node.lerobot_checkpoint_dir=DIR` evaluates another checkpoint.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult
from carryon_bench.plots import bar_chart
from carryon_common.core.errors import CarryOnError
from carryon_sim.harness.learned import layout
from carryon_sim.harness.learned.evaluate import summary
from carryon_sim.harness.learned.serving import checked_checkpoint, extra_env, lerobot_python, trained_summary

SLUGS = {"put the carrot in the bowl": "pick_place", "open the pink cover": "open_cover"}  # the tasks, in order


def checkpoint_of(options: BenchOptions) -> Path:
    """`--set policy_node.lerobot_checkpoint_dir=DIR`, else the one make policy trains."""
    for entry in options.sets:
        key, _, value = entry.partition("=")
        if key.strip() == "policy_node.lerobot_checkpoint_dir" and value.strip():
            return Path(value.strip()).expanduser()
    return layout.default_checkpoint()


def run(options: BenchOptions) -> BenchResult:
    checkpoint = checked_checkpoint(checkpoint_of(options))
    episodes = options.count(full=100, quick=5)
    python = lerobot_python()
    options.run_dir.mkdir(parents=True, exist_ok=True)
    files = {task: options.run_dir / f"rows-{slug}-{episodes}.jsonl" for task, slug in SLUGS.items()}
    pending = list(files.items())
    running: list[tuple[Path, subprocess.Popen[bytes]]] = []
    while pending or running:  # one child per task, --jobs at a time (each on one CPU thread)
        while pending and len(running) < options.jobs:
            task, rows = pending.pop(0)
            command = [python, "-m", "carryon_sim.harness.learned.evaluate", "--checkpoint", str(checkpoint)]
            command += ["--rows", str(rows), "--episodes", str(episodes), "--seed", str(options.seed), "--task", task]
            running.append((rows, subprocess.Popen(command, env=extra_env(), stdout=subprocess.DEVNULL)))
        rows, child = running.pop(0)
        if child.wait() != 0:
            raise CarryOnError(f"the learned policy's episodes failed (exit {child.returncode}); rows so far: {rows}")
    played = [json.loads(line) for rows in files.values() for line in rows.read_text(encoding="utf-8").splitlines()]
    figures = summary(played)
    result = BenchResult("learned", options.quick, options.seed)
    for instruction, task in figures["tasks"].items():
        name = "success_" + SLUGS[instruction]
        note = f"{task['succeeded']} of {task['episodes']} episodes ({instruction!r}), no shield"
        result.add(name, 100 * task["success_rate"], "%", note)
    if figures["chunks"]:
        note = f"lerobot_local, one CPU thread, {figures['chunks']} chunks (images resized from 256x256 included)"
        result.add("inference_p50", 1000 * figures["infer_s_p50"], "ms", note)
        result.add("inference_p99", 1000 * figures["infer_s_p99"], "ms", note)
    trained = trained_summary(checkpoint)
    if trained.get("train_seconds") is not None:
        note = f"{trained['steps']} steps at batch {trained['batch_size']} on {trained['device']}"
        note += f", seed {trained['seed']}"
        result.add("training_time", trained["train_seconds"] / 60.0, "min", note)
    result.details.update(
        checkpoint=str(checkpoint),
        trained=trained,
        episodes_per_task=episodes,
        tasks=figures["tasks"],
    )
    bar_chart(
        options.run_dir / "learned.png",
        f"learned policy alone: success over {episodes} episodes per task (seed {options.seed})",
        list(figures["tasks"]),
        {"success": [100 * t["success_rate"] for t in figures["tasks"].values()]},
        unit="%",
        ylim=(0, 105),
    )
    return result


BENCHMARKS.register(
    "learned",
    Benchmark("learned", "the learned policy (LeRobot ACT from pixels) alone: task success, inference time", run),
)
