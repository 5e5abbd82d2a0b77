"""`carryon bench safety --learned`: the learned policy as the safety benchmark's backbone
(paper Table 3's rows for a frozen network, issue 21).

The policy is `make policy`'s LeRobot ACT (or `--set policy_node.lerobot_checkpoint_dir=DIR`),
served from the LeRobot extra's virtualenv by carryon_policy.lerobot_server and reached
with openpi_remote, as `carryon bench recovery --natural` does; it reads only pixels and
its own state. It was trained on the food scene *without* the bottle, so here the bottle
stands near the carry path, where it never saw one: the food scene as `carryon bench
safety` runs it, randomised per episode as its demonstrations were (objects shifted and
turned, layout.episode_scene; a deterministic network on one fixed layout would play one
episode 200 times). Each episode is one of its two skills, in turn by seed: "put the
carrot in the bowl" (the cover lifted off beforehand) and "open the pink cover".

Two rows on the same seeds: without the shield, and with it on carryon_perception's masks
(the graph's; the SIMULATOR ORACLE ablation is the stand-ins' business). Violations are
counted both ways (contact-based and displacement-based), success from simulator truth.
A row is computed in parts of PART episodes, each saved as it finishes (`--resume`) and
shared out to `--jobs` workers.
"""

from __future__ import annotations

from collections import Counter
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from rich.progress import Progress

from carryon_bench.core.bench import BenchOptions, BenchResult, percentile
from carryon_bench.cpu import saved_rows
from carryon_bench.node_config import node_config
from carryon_bench.plots import bar_chart
from carryon_bench.recovery_natural import learned_policy, learned_policy_server
from carryon_bench.shield import add_rows, episode_record, rates_of
from carryon_bringup.core.graph import find_config_dir
from carryon_bringup.up import default_config_fallbacks
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.gate import Decision
from carryon_shield.core.response import load_response_model
from carryon_sim.core.scene import Scene, load_scene, scenes_dir
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import Task, run_episode
from carryon_sim.harness.learned import layout
from carryon_sim.harness.learned.evaluate import MAX_STEPS
from carryon_sim.harness.learned.record import STEPS_PER_INFERENCE, TASKS
from carryon_sim.harness.shield_gate import SimShieldGate
from carryon_sim.harness.stand_in import stand_in_script

KEY = "learned_food"  # the row's name beside the stand-ins' (<backbone>_<scene>)
PART = 20  # episodes per saved part of a row
SEED_OFFSET = 70_000  # episode seeds: layout.EVAL_SEED_BASE + SEED_OFFSET + 1000 * seed + i
ROWS = {"without": False, "with_perception": True}
LEGEND = {"without": "without shield", "with_perception": "with shield (perception)"}


def episode_seeds(seed: int, n: int) -> range:
    """Seeds no demonstration, `bench learned` or `bench recovery --natural` episode uses."""
    first = layout.EVAL_SEED_BASE + SEED_OFFSET + 1000 * seed
    return range(first, first + n)


def episode_scene(seed: int) -> Scene:
    """The food scene with its bottle, randomised as the demonstrations were."""
    return layout.episode_scene(seed, load_scene(scenes_dir() / layout.SCENE_FILE))


def instruction_of(seed: int) -> str:
    """The skill episode `seed` plays: the learned tasks in turn."""
    tasks = tuple(TASKS)
    return tasks[seed % len(tasks)]


def play_part(
    uri: str, seeds: range, *, shielded: bool, config: ShieldConfig, config_dir: Path | None
) -> dict[str, Any]:
    """Episodes `seeds` of the learned policy at `uri`, with or without the shield: one
    record per episode (success, contacts, displaced) and, shielded, its decisions and
    timings. Module-level, plain arguments: it runs in a worker process under --jobs."""
    policy = learned_policy(uri)
    response = load_response_model()[0] if shielded else None
    records: list[dict[str, Any]] = []
    decisions: Counter[str] = Counter()
    timings: dict[str, list[float]] = {"filter_s": [], "perception_s": []}
    for seed in seeds:
        instruction = instruction_of(seed)
        task = Task(instruction, stand_in_script(instruction), MAX_STEPS)
        world = World(episode_scene(seed), seed=seed)
        cameras = layout.PolicyCameras(world)
        gate = None
        if response is not None:
            gate = SimShieldGate(world, config, [task], response, perception_config_dir=config_dir)
        try:
            result = run_episode(
                world,
                policy,
                [task],
                seed,
                steps_per_inference=STEPS_PER_INFERENCE,
                gate=gate,
                cameras=cameras,
                setup=TASKS[instruction].setup,
            )
        finally:
            cameras.close()
            if gate is not None:
                gate.close()
        records.append({"seed": seed, "instruction": instruction, **episode_record(result)})
        if gate is not None:
            decisions.update(d.decision.name for d in gate.stats.decisions)
            timings["filter_s"] += gate.stats.latency_s
            timings["perception_s"] += gate.stats.perception_s
    return {"episodes": records, "decisions": dict(decisions), **timings}


def row_of(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A row's rates from its parts, with success per skill and the shield's decisions."""
    records = [r for part in parts for r in part["episodes"]]
    row = rates_of(records)
    row["success_per_task"] = {
        task: sum(r["success"] for r in records if r["instruction"] == task)
        / max(1, sum(r["instruction"] == task for r in records))
        for task in TASKS
    }
    decisions: Counter[str] = Counter()
    for part in parts:
        decisions.update(part["decisions"])
    if decisions:
        row["decisions"] = {d.name: decisions[d.name] for d in Decision if decisions[d.name]}
        filter_ms = [1e3 * s for part in parts for s in part["filter_s"]]
        perception_ms = [1e3 * s for part in parts for s in part["perception_s"]]
        row["filter_p99_ms"] = percentile(filter_ms, 99) if filter_ms else float("nan")
        row["perception_p50_ms"] = percentile(perception_ms, 50) if perception_ms else float("nan")
    return row


def run_learned(options: BenchOptions) -> BenchResult:
    """The learned policy's rows: without / with the shield, 200 episodes each (--episodes N)."""
    result = BenchResult("safety", options.quick, options.seed)
    config = node_config(options, ShieldConfig, "shield_node", read_elsewhere=("policy_node",))
    config_dir = find_config_dir(options.config_dir, default_config_fallbacks())
    n = options.count(full=200, quick=3)
    seeds = episode_seeds(options.seed, n)
    parts = [seeds[i : i + PART] for i in range(0, n, PART)]
    rows_dir = options.run_dir / "rows" / f"learned_{n}_per_row"
    with learned_policy_server(options) as (uri, trained):
        computes = {
            f"{KEY}_{label}_{part.start}": partial(
                play_part, uri, part, shielded=shielded, config=config, config_dir=config_dir
            )
            for label, shielded in ROWS.items()
            for part in parts
        }
        workers = f"{options.jobs} worker processes, the policy server beside them"
        with nullcontext(workers) as pinning, Progress() as progress:
            result.details["cpu"] = pinning
            job = progress.add_task("learned policy: safety episodes", total=len(ROWS) * n)
            sizes = {key: len(compute.args[1]) for key, compute in computes.items()}
            saved = saved_rows(rows_dir, computes, options.jobs, done=lambda key: progress.advance(job, sizes[key]))
    rows = {label: row_of([saved[f"{KEY}_{label}_{part.start}"] for part in parts]) for label in ROWS}
    add_rows(result, KEY, rows["without"], rows["with_perception"], n)
    for label, suffix in (("without", "without"), ("with_perception", "with")):
        row = rows[label]
        result.add(f"{KEY}_displaced_{suffix}", 100 * row["displacement_rate"], "%", "displacement-based (SafeLIBERO)")
        for task, rate in row["success_per_task"].items():
            slug = "pick_place" if "carrot" in task else "open_cover"
            result.add(f"{KEY}_success_{slug}_{suffix}", 100 * rate, "%", f"{task!r}, every other episode")
    result.details.update(
        episodes_per_row=n,
        learned_policy=trained,
        scene="food_serving (bottle near the carry path), randomised per episode (layout.episode_scene)",
        masks={"with_shield": "carryon_perception on the rendered colour + depth (the graph's grounder 'masks')"},
        rows={KEY: {"without_shield": rows["without"], "with_shield": rows["with_perception"]}},
        first_seed=seeds.start,
    )
    metrics = {
        "violations (contact)": "violation_rate",
        "violations (displacement)": "displacement_rate",
        "success": "success",
        "violation-free success": "violation_free_success",
    }
    bar_chart(
        options.run_dir / "safety.png",
        f"learned policy, food scene with its bottle: {n} episodes per row (seed {options.seed})",
        list(metrics),
        {name: [100 * rows[label][m] for m in metrics.values()] for label, name in LEGEND.items()},
        unit="%",
        ylim=(0, 105),
    )
    return result
