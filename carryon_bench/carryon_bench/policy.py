"""`carryon bench policy`: what the policy backends do on their own, and how fast.

1. Episodes (in-process MuJoCo, no ROS, no shield): the scripted stand-ins play the
   food-serving subtasks ("open the pink cover", then "put the carrot in the bowl") on
   seeded episodes without obstacles (task success, goal >= 90 %), and with the obstacles
   of the food and safety scenes on their path (collision rate: the share of episodes with
   any contact the task does not permit; it should be substantial, that is what the shield
   is for). Success and contacts come from simulator ground truth.
2. Inference latency per backend: the stand-in (from the episodes), `openpi_remote`
   against the local fake openpi server over loopback websocket, and `lerobot_local` with a
   tiny random ACT checkpoint when the LeRobot extra is installed.
3. Chunk-stream jitter: sim_node + policy_node as separate processes (`carryon up`), one
   chunk per control step at 20 Hz; intervals between chunk arrivals at a subscriber.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

import carryon_common
import carryon_policy
import carryon_sim
from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, percentile
from carryon_bringup.graph_run import GraphRun
from carryon_bringup.up import load_spec
from carryon_policy.core.backends import make_policy
from carryon_policy.core.config import PolicyConfig
from carryon_sim.core.scene import Scene, load_scene, scenes_dir
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import EpisodeResult, Task, observe, run_episode, without_obstacles
from carryon_sim.harness.stand_in import stand_in_script

FOOD_TASKS = ("open the pink cover", "put the carrot in the bowl")
SAFETY_TASKS = ("put the cube in the bowl",)
LEROBOT_VENV = Path(".venv-lerobot")  # made by scripts/test_lerobot_extra.sh (run benchmarks from the workspace root)


def _tasks(instructions: Sequence[str]) -> list[Task]:
    """Episode tasks of the stand-in's scripts (config/sim/stand_in_scripts.yaml)."""
    return [Task(instruction, stand_in_script(instruction), max_steps=400) for instruction in instructions]


def _episodes(
    progress: Progress, label: str, scene: Scene, *, backend: str, tasks: list[Task], seeds: range
) -> list[EpisodeResult]:
    world = World(scene, seed=seeds.start)
    config = PolicyConfig(backend=backend)
    policy = make_policy(config)
    job = progress.add_task(label, total=len(seeds))
    results = []
    for seed in seeds:
        results.append(run_episode(world, policy, tasks, seed, steps_per_inference=config.steps_per_inference))
        progress.advance(job)
    return results


def _summarise(result: BenchResult, key: str, note: str, episodes: list[EpisodeResult]) -> dict[str, Any]:
    n = len(episodes)
    success = sum(e.success for e in episodes) / n
    collided = sum(e.collided for e in episodes) / n
    result.add(f"{key}_success", 100 * success, "%", f"{note}, {n} episodes")
    result.add(f"{key}_collision_rate", 100 * collided, "%", "episodes with any contact the task does not permit")
    touched: dict[str, int] = {}
    for episode in episodes:
        for violation in episode.violations:
            touched[violation.touched] = touched.get(violation.touched, 0) + 1
    return {
        "episodes": n,
        "success": success,
        "collision_rate": collided,
        "violation_free_success": sum(e.success and not e.collided for e in episodes) / n,
        "completed_tasks": [e.completed for e in episodes],
        "contacts_by_object": touched,
    }


def _openpi_latency(calls: int) -> list[tuple[float, float]]:
    """(client round trip, server-reported) seconds per inference against the fake server."""
    from carryon_sim.harness.fakes.openpi_server import serve_in_background

    uri, stop = serve_in_background()
    try:
        policy = make_policy(PolicyConfig(backend="openpi_remote", remote_uri=uri))
        world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
        rng = np.random.default_rng(0)
        base = observe(world, 1, 0)
        images = {name: rng.integers(0, 255, (256, 256, 3), dtype=np.uint8) for name in policy.metadata.cameras}
        observation = type(base)(1, base.stamp_s, base.robot, images=images)
        policy.reset("put the carrot in the bowl", 0)
        samples = []
        for _ in range(calls + 3):
            began = time.perf_counter()
            out = policy.infer(observation)
            samples.append((time.perf_counter() - began, out.server_infer_s))
        policy.close()
        return samples[3:]  # the first calls include connecting
    finally:
        stop()


def _lerobot_latency(calls: int) -> list[float] | str:
    """Seconds per inference of lerobot_local (tiny random ACT) in the extra's virtualenv,
    or why it was not measured."""
    python = Path(sys.executable)
    if importlib.util.find_spec("lerobot") is None:
        python = LEROBOT_VENV.resolve() / "bin" / "python"
        if not python.exists():
            return (
                f"skipped: the LeRobot extra is not installed (bash scripts/test_lerobot_extra.sh makes {LEROBOT_VENV})"
            )
    paths = [
        str(Path(module.__file__ or "").resolve().parent.parent)
        for module in (carryon_common, carryon_policy, carryon_sim)
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "OMP_NUM_THREADS": "1"}
    command = [str(python), "-m", "carryon_sim.harness.fakes.tiny_act", "--latency", str(calls)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"lerobot latency run failed:\n{done.stderr[-2000:]}")
    samples: list[float] = json.loads(done.stdout)["infer_s"]
    return samples


def _chunk_stream(run_dir: Path, steps: int) -> dict[str, Any]:
    spec = load_spec(None)
    overrides = ["--set", "policy_node.steps_per_inference=1", "--set", "policy_node.chunk_horizon=16"]
    with GraphRun(spec, run_dir / "chunk-stream", only=["sim_node", "policy_node"], extra_args=overrides) as graph:
        graph.wait_ready(timeout_s=90.0)
        command = [
            sys.executable,
            "-m",
            "carryon_bench.chunk_stream",
            "--namespace",
            spec.namespace,
            "--instruction",
            FOOD_TASKS[0],
            "--steps",
            str(steps),
        ]
        done = subprocess.run(command, env=graph.env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"chunk stream probe failed:\n{done.stdout}\n{done.stderr}")
    stream: dict[str, Any] = json.loads(done.stdout)
    return stream


def run(options: BenchOptions) -> BenchResult:
    result = BenchResult("policy", options.quick, options.seed)
    food = load_scene(scenes_dir() / "food_serving.yaml")
    safety = load_scene(scenes_dir() / "safety.yaml")
    n_clear = 10 if options.quick else 50
    n_obstacles = 5 if options.quick else 50
    first = options.seed * 1000
    food_tasks, safety_tasks = _tasks(FOOD_TASKS), _tasks(SAFETY_TASKS)
    with Progress() as progress:
        clear = _episodes(
            progress,
            "sim_scripted, food, no obstacles",
            without_obstacles(food),
            backend="sim_scripted",
            tasks=food_tasks,
            seeds=range(first, first + n_clear),
        )
        result.details["food_no_obstacles"] = _summarise(
            result, "food_no_obstacles", "sim_scripted: open cover + carrot in bowl, obstacles removed", clear
        )
        for backend in ("sim_scripted", "sim_scripted_safe"):
            for scene, tasks, name in ((food, food_tasks, "food"), (safety, safety_tasks, "safety")):
                seeds = range(first, first + n_obstacles)
                runs = _episodes(
                    progress, f"{backend}, {name}, obstacles", scene, backend=backend, tasks=tasks, seeds=seeds
                )
                key = f"{backend}_{name}_obstacles"
                result.details[key] = _summarise(result, key, f"{backend} in scene {name} with its obstacles", runs)
    infer_ms = [1e3 * s for e in clear for s in e.infer_s]
    result.add("sim_scripted_infer_p50", percentile(infer_ms, 50), "ms", f"{len(infer_ms)} inferences")
    result.add("sim_scripted_infer_p99", percentile(infer_ms, 99), "ms")

    samples = _openpi_latency(20 if options.quick else 200)
    client_ms = [1e3 * c for c, _ in samples]
    result.add("openpi_remote_infer_p50", percentile(client_ms, 50), "ms", "fake server on loopback, 2 images 224x224")
    result.add("openpi_remote_infer_p99", percentile(client_ms, 99), "ms")
    result.add("openpi_remote_server_p50", percentile([1e3 * s for _, s in samples], 50), "ms", "server_timing")

    lerobot = _lerobot_latency(10 if options.quick else 50)
    if isinstance(lerobot, str):
        result.details["lerobot_local"] = lerobot
    else:
        lerobot_ms = [1e3 * s for s in lerobot]
        result.add("lerobot_local_infer_p50", percentile(lerobot_ms, 50), "ms", "tiny random ACT, CPU, 1 thread")
        result.add("lerobot_local_infer_p99", percentile(lerobot_ms, 99), "ms")

    steps = 100 if options.quick else 400
    stream = _chunk_stream(options.run_dir, steps)
    intervals = np.diff(np.asarray(stream["arrivals"])) * 1e3
    sim_intervals = np.diff(np.asarray(stream["stamps"])) * 1e3
    result.add("chunk_rate_sim_time", 1e3 / float(np.mean(sim_intervals)), "Hz", "by chunk stamps (sim clock), goal 20")
    sim_jitter = list(np.abs(sim_intervals - 50.0))
    result.add("chunk_jitter_sim_time_p99", percentile(sim_jitter, 99), "ms", "|stamp interval - 50 ms|")
    result.add("chunk_rate_wall", 1e3 / float(np.mean(intervals)), "Hz", f"{len(intervals) + 1} chunks at a subscriber")
    jitter = list(np.abs(intervals - 50.0))
    result.add("chunk_jitter_wall_p50", percentile(jitter, 50), "ms", "|arrival interval - 50 ms|, wall clock")
    result.add("chunk_jitter_wall_p99", percentile(jitter, 99), "ms")
    span_wall = stream["arrivals"][-1] - stream["arrivals"][0]
    span_sim = stream["stamps"][-1] - stream["stamps"][0]
    result.add("sim_real_time_factor", span_sim / span_wall, "x", "simulated / wall seconds during the stream")
    result.details["chunk_intervals_ms"] = [round(float(v), 3) for v in intervals]
    result.details["chunk_stamp_intervals_ms"] = [round(float(v), 3) for v in sim_intervals]
    return result


BENCHMARKS.register(
    "policy",
    Benchmark(
        "policy",
        "stand-in task success and collisions, inference latency per backend, chunk-stream jitter at 20 Hz",
        run,
    ),
)
