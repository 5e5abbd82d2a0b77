"""`carryon bench shield`: how fast the shield decides, and what it does in episodes.

1. Per-chunk latency (p50/p99) of the filter (response model + per-part checks + prefix
   or retreat; grounding excluded, it happens once per camera frame) against obstacle
   sets of 1k-100k points and chunk horizons of 8-50 steps. The synthetic scene is a
   table with a bottle on the chunk's path, so the chunk is blocked part way. The
   compiled kernel is warmed up first. Goal on one core: 16 steps vs 20k points p99 <= 1.6 ms.
2. Grounding time per 640x480 RGB-D frame (the mask grounder: back-projection, labels,
   exemptions, voxel downsampling), on rendered food-scene frames labelled with the
   SIMULATOR ORACLE's masks: this times grounding only (perception's own time per frame is
   `carryon bench perception`'s, and the episodes' `perception_p50_ms`). Goal <= 20 ms.
3. Episodes (in-process MuJoCo, no ROS): the scripted stand-ins with and without the
   shield on the food-serving scene (bottle on the path) and the safety scene: success,
   violation rate (episodes with any contact the task does not permit, ground truth),
   violation-free success (paper Table 3 shape). With the shield the cameras are rendered
   at 256x256 every inference (sim_node's default size) and carryon_perception segments
   them (SimShieldGate masks="perception", as in the graph); `carryon bench safety` adds
   the SIMULATOR ORACLE ablation.

Runs on one core: the process pins itself to one CPU (os.sched_setaffinity) and BLAS to
one thread for the whole benchmark.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, percentile
from carryon_bench.cpu import one_core
from carryon_bench.node_config import node_config
from carryon_bench.policy import FOOD_TASKS, SAFETY_TASKS, _tasks
from carryon_bringup.core.graph import find_config_dir
from carryon_bringup.up import default_config_fallbacks
from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_policy.core.backends import make_policy
from carryon_policy.core.config import PolicyConfig
from carryon_robot.core.kinematics import load_robot
from carryon_shield.core.build import build_shield, grounding_params
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.filter import Snapshot
from carryon_shield.core.gate import Decision
from carryon_shield.core.geometry import GripperGeometry
from carryon_shield.core.grounding import MaskGrounder
from carryon_shield.core.kernel import warm_up
from carryon_shield.core.response import load_response_model
from carryon_shield.core.types import ObstacleSet, RgbdFrame, RobotState, TaskSpec
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.scene import Scene, load_scene, scenes_dir
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import EpisodeResult, Task, run_episode
from carryon_sim.harness.shield_gate import CAMERAS, SimShieldGate

POINTS = (1_000, 5_000, 20_000, 100_000)
HORIZONS = (8, 16, 32, 50)
# A downward tool (finger axis along world y), as the stand-in holds it.
DOWN = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])


def synthetic_obstacles(n: int, rng: np.random.Generator) -> ObstacleSet:
    """n points: 85 % a table top (z 0.42) and 15 % a bottle (radius 0.035, 0.2 m) at
    (0.55, 0.02), world frame."""
    n_bottle = n * 15 // 100
    table = np.column_stack(
        [rng.uniform(0.2, 0.9, n - n_bottle), rng.uniform(-0.5, 0.5, n - n_bottle), np.full(n - n_bottle, 0.42)]
    )
    angle = rng.uniform(0, 2 * np.pi, n_bottle)
    bottle = np.column_stack(
        [0.55 + 0.035 * np.cos(angle), 0.02 + 0.035 * np.sin(angle), rng.uniform(0.42, 0.62, n_bottle)]
    )
    labels = np.concatenate([np.full(len(table), 1), np.full(n_bottle, 2)]).astype(np.int32)
    return ObstacleSet(np.concatenate([table, bottle]), labels, ("unknown", "table", "bottle"), 0.0, "world")


def approach_chunk(horizon: int) -> Chunk:
    """Absolute steps of 1 cm along -y at 0.52 m, from y = 0.20 towards the bottle."""
    positions = np.column_stack(
        [np.full(horizon, 0.55), 0.20 - 0.01 * (np.arange(horizon) + 1), np.full(horizon, 0.52)]
    )
    rotvec = np.array([np.pi / np.sqrt(2), np.pi / np.sqrt(2), 0.0])  # DOWN as a rotation vector
    return Chunk(
        1,
        "bench",
        ChunkSource.POLICY,
        Convention.ABSOLUTE,
        "world",
        0.05,
        1,
        0.0,
        positions,
        np.tile(rotvec, (horizon, 1)),
        np.ones(horizon),
    )


def arm_joints_at(position: np.ndarray, rotation: np.ndarray, robot_file: str = "") -> np.ndarray:
    """The Panda's joints with its tool at the pose (IK from the ready configuration)."""
    kinematics = load_robot(robot_file).kinematics()
    ready = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
    solution = kinematics.inverse(ready, position, rotation, max_iterations=200)
    if solution.position_error_m > 1e-3:
        raise RuntimeError(f"the benchmark's tool pose is out of the arm's reach ({solution.position_error_m:.3f} m)")
    return solution.q


def filter_latency(reps: int, result: BenchResult, config: ShieldConfig) -> dict[str, Any]:
    response, _ = load_response_model()
    rng = np.random.default_rng(0)
    tool = np.array([0.55, 0.2, 0.52])
    state = RobotState(tool, DOWN, np.array([0.0, -0.2, 0.0]), 0.02, 1.0, 0.0, joints=arm_joints_at(tool, DOWN))
    carried = np.array([[0.0, 0.0, 0.02, 0.017], [0.0, 0.0, 0.04, 0.017]])
    table: dict[str, Any] = {}
    warm_up()
    for n in POINTS:
        obstacles = synthetic_obstacles(n, rng)
        snapshot = Snapshot(obstacles, state, GripperGeometry.build(0.02, carried), True)
        shield = build_shield(config, response, perceive=lambda _now, s=snapshot: s).shield
        for horizon in HORIZONS:
            chunk = approach_chunk(horizon)
            samples = []
            decision = shield.decide(chunk, snapshot)
            for _ in range(reps):
                began = time.perf_counter()
                shield.decide(chunk, snapshot)
                samples.append(1e3 * (time.perf_counter() - began))
            key = f"{n // 1000}k_pts_{horizon}_steps"
            table[key] = {
                "p50_ms": percentile(samples, 50),
                "p99_ms": percentile(samples, 99),
                "per_step_p99_ms": percentile(samples, 99) / horizon,
                "decision": decision.decision.name,
                "released": decision.released_steps,
            }
            if n == 20_000 and horizon == 16:
                result.add("filter_16_steps_20k_p50", percentile(samples, 50), "ms", "goal: p99 <= 1.6 ms")
                result.add("filter_16_steps_20k_p99", percentile(samples, 99), "ms", f"{decision.decision.name}")
    worst = max(table.values(), key=lambda row: row["p99_ms"])
    result.add("filter_worst_p99", worst["p99_ms"], "ms", "over 1k-100k points x 8-50 steps")
    return table


def grounding_time(reps: int, result: BenchResult, config: ShieldConfig) -> dict[str, Any]:
    """Grounding alone, on frames labelled by the SIMULATOR ORACLE (the simulator's masks)."""
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    rig = CameraRig(world.model, world.object_of_body, 640, 480)
    try:
        rendered = {name: rig.render(world.data, mujoco_name, rgb=False) for name, mujoco_name in CAMERAS.items()}
        frames = [
            RgbdFrame(
                name,
                f.depth,
                f.K,
                f.world_from_camera,
                0.0,
                segmentation=f.segmentation,
                labels=f.labels,
                mask_stamp_s=0.0,
            )
            for name, f in rendered.items()
        ]
    finally:
        rig.close()
    task = TaskSpec("bench", "carrot", "table", "bowl")
    out: dict[str, Any] = {}
    for stride in (config.pixel_stride, 4):
        grounder = MaskGrounder(replace(grounding_params(config), stride=stride))
        for label, subset in (("scene", frames[:1]), ("wrist", frames[1:]), ("fused", frames)):
            ground_ms = []
            points = 0
            for _ in range(reps):
                began = time.perf_counter()
                obstacles = grounder.ground(subset, task)
                ground_ms.append(1e3 * (time.perf_counter() - began))
                points = len(obstacles)
            out[f"stride{stride}_{label}"] = {
                "frames": len(subset),
                "ground_p50_ms": percentile(ground_ms, 50),
                "ground_p99_ms": percentile(ground_ms, 99),
                "obstacle_points": points,
                "per_frame_p50_ms": percentile([g / len(subset) for g in ground_ms], 50),
            }
        fused = out[f"stride{stride}_fused"]
        note = f"640x480, pixel stride {stride}, scene+wrist fused / 2, SIMULATOR ORACLE masks; goal <= 20"
        result.add(f"grounding_stride{stride}_per_frame_p50", fused["per_frame_p50_ms"], "ms", note)
        worst = max(out[f"stride{stride}_scene"]["ground_p99_ms"], out[f"stride{stride}_wrist"]["ground_p99_ms"])
        result.add(f"grounding_stride{stride}_per_frame_p99", worst, "ms", "worst single camera p99")
        result.add(f"grounding_stride{stride}_points", fused["obstacle_points"], "points", "fused obstacle set")
    return out


def _run(
    world: World, backend: str, tasks: list[Task], seeds: range, gate: SimShieldGate | None
) -> list[EpisodeResult]:
    policy = make_policy(PolicyConfig(backend=backend))
    results = []
    for seed in seeds:
        if gate is not None:
            gate.reset()
        results.append(run_episode(world, policy, tasks, seed, steps_per_inference=8, gate=gate))
    return results


def episode_record(episode: EpisodeResult) -> dict[str, Any]:
    """What the rates need of one episode, as plain data (a saved part of a row keeps these)."""
    return {
        "success": episode.success,
        "contacts": [f"{v.mover}-{v.touched}" for v in episode.violations],
        # which part of the robot made them: hand, fingers, carried object or a link of the arm
        "parts": sorted({part for v in episode.violations for part in (v.robot_parts or ("carried object",))}),
        # SafeLIBERO's violation: an object no task names displaced > 1 mm (EpisodeResult.displaced)
        "displaced": sorted(episode.displaced),
    }


HAND_PARTS = ("hand", "fingers", "carried object")  # every other part of a contact is a link of the arm


def rates_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Success, contact- and displacement-based violation rates over episode records."""
    n = len(records)
    return {
        "episodes": n,
        "success": sum(r["success"] for r in records) / n,
        "violation_rate": sum(bool(r["contacts"]) for r in records) / n,
        "violation_free_success": sum(r["success"] and not r["contacts"] for r in records) / n,
        "contacts": dict(Counter(c for r in records for c in r["contacts"])),
        # the share of episodes with an unpermitted contact by a link of the arm, and by each part
        "arm_link_contact_rate": sum(any(p not in HAND_PARTS for p in r.get("parts", ())) for r in records) / n,
        "contact_rate_by_part": {
            part: count / n for part, count in sorted(Counter(p for r in records for p in r.get("parts", ())).items())
        },
        "displacement_rate": sum(bool(r["displaced"]) for r in records) / n,
        "displacement_free_success": sum(r["success"] and not r["displaced"] for r in records) / n,
        "displaced": dict(Counter(name for r in records for name in r["displaced"])),
    }


def _rates(episodes: list[EpisodeResult]) -> dict[str, Any]:
    return rates_of([episode_record(e) for e in episodes])


BACKBONES = ("sim_scripted", "sim_scripted_safe")
SCENES = ("food", "safety", "arm")


def scene_tasks(name: str) -> tuple[Scene, list[Task]]:
    """The episode scenes: food (the demo's, a bottle on the path), safety (obstacles near
    the hand's path) and arm (tall posts where the forearm and the elbow pass)."""
    if name == "food":
        return load_scene(scenes_dir() / "food_serving.yaml"), _tasks(FOOD_TASKS)
    if name == "arm":
        return load_scene(scenes_dir() / "safety_arm.yaml"), _tasks(SAFETY_TASKS)
    return load_scene(scenes_dir() / "safety.yaml"), _tasks(SAFETY_TASKS)


def episode_row(
    backend: str,
    scene_name: str,
    seeds: range,
    *,
    shielded: bool,
    config: ShieldConfig,
    masks: str = "perception",
    config_dir: Path | None = None,
) -> dict[str, Any]:
    """Rates over `seeds` for one backbone and scene, with or without the shield (with it:
    the shield's decisions and timings too). `masks`: what the shield sees (SimShieldGate:
    `perception`, carryon_perception with its config files under `config_dir`, or
    `sim_truth`, the SIMULATOR ORACLE's masks, an ablation)."""
    scene, tasks = scene_tasks(scene_name)
    world = World(scene, seed=seeds.start)
    if not shielded:
        return _rates(_run(world, backend, tasks, seeds, None))
    response, _ = load_response_model()
    gate = SimShieldGate(world, config, tasks, response, masks=masks, perception_config_dir=config_dir)
    try:
        began = time.perf_counter()
        row = _rates(_run(world, backend, tasks, seeds, gate))
        wall = time.perf_counter() - began
    finally:
        gate.close()
    stats = gate.stats
    row["masks"] = masks
    row["decisions"] = {d.name: stats.count(d) for d in Decision if stats.count(d)}
    row["filter_p99_ms"] = percentile([1e3 * s for s in stats.latency_s], 99)
    row["grounding_p50_ms"] = percentile([1e3 * s for s in stats.grounding_s], 50)
    if stats.perception_s:
        row["perception_p50_ms"] = percentile([1e3 * s for s in stats.perception_s], 50)
        row["perception_p99_ms"] = percentile([1e3 * s for s in stats.perception_s], 99)
    row["wall_s_per_episode"] = wall / len(seeds)
    return row


def add_rows(result: BenchResult, key: str, without: dict[str, Any], shielded: dict[str, Any], n: int) -> None:
    result.add(f"{key}_violations_without", 100 * without["violation_rate"], "%", f"{n} episodes, no shield")
    result.add(f"{key}_violations_with", 100 * shielded["violation_rate"], "%", "with the shield (perception's masks)")
    result.add(f"{key}_success_without", 100 * without["success"], "%")
    result.add(f"{key}_success_with", 100 * shielded["success"], "%")
    vf = "violation-free success"
    result.add(f"{key}_vf_success_without", 100 * without["violation_free_success"], "%", vf)
    result.add(f"{key}_vf_success_with", 100 * shielded["violation_free_success"], "%")


def episodes(
    n: int, first_seed: int, result: BenchResult, config: ShieldConfig, config_dir: Path | None = None
) -> dict[str, Any]:
    seeds = range(first_seed, first_seed + n)
    out: dict[str, Any] = {}
    with Progress() as progress:
        job = progress.add_task("episodes (without / with shield)", total=2 * 2 * 2 * n)
        for backend in BACKBONES:
            for name in SCENES:
                without = episode_row(backend, name, seeds, shielded=False, config=config)
                progress.advance(job, n)
                shielded = episode_row(backend, name, seeds, shielded=True, config=config, config_dir=config_dir)
                progress.advance(job, n)
                key = f"{backend}_{name}"
                out[key] = {
                    "without_shield": without,
                    "with_shield": shielded,
                    **{
                        k: shielded.pop(k)
                        for k in (
                            "masks",
                            "decisions",
                            "filter_p99_ms",
                            "grounding_p50_ms",
                            "perception_p50_ms",
                            "perception_p99_ms",
                            "wall_s_per_episode",
                        )
                        if k in shielded
                    },
                }
                add_rows(result, key, without, shielded, n)
    return out


def run(options: BenchOptions) -> BenchResult:
    result = BenchResult("shield", options.quick, options.seed)
    config = node_config(options, ShieldConfig, "shield_node")
    with one_core() as pinning:
        result.details["cpu"] = pinning
        result.details["filter_latency"] = filter_latency(30 if options.quick else 300, result, config)
        result.details["grounding"] = grounding_time(5 if options.quick else 30, result, config)
        config_dir = find_config_dir(options.config_dir, default_config_fallbacks())
        n = 3 if options.quick else 50
        result.details["episodes"] = episodes(n, options.seed * 1000, result, config, config_dir)
    return result


BENCHMARKS.register(
    "shield",
    Benchmark(
        "shield",
        "filter latency vs obstacle points and horizon, grounding time per frame, episodes with / without shield",
        run,
    ),
)
