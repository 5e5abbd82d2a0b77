"""Demonstrations for the learned policy, recorded as a LeRobotDataset.

The expert is the scripted stand-in (`sim_scripted`, its injected failures off; it reads
simulator truth, which is what makes it an expert here, never a runtime part). It plays the
food scene's skills on randomised episodes (layout.episode_scene: object positions and
yaws; lighting drawn per episode); every control step becomes one frame: both cameras as
the policy reads them, the robot state, and the action the arm was commanded at that step
(layout.py). Only demonstrations the expert completed are kept (success from simulator
truth, after it settled); the rest are counted and dropped.

The dataset is LeRobot's own format (v3.0, `LeRobotDataset.create`, images stored in the
parquet files, no video codec needed), so LeRobot's tools load it; `carryon_demos.json`
beside it says how it was made. Needs the LeRobot extra (.venv-lerobot):

    python -m carryon_sim.harness.learned.record --out DIR [--episodes 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from carryon_policy.core import learned_layout
from carryon_policy.core.backends import BACKENDS
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.learned_layout import features
from carryon_policy.core.policy import RobotState
from carryon_sim.core.driver import Driver
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import Task, run_episode
from carryon_sim.harness.learned import layout
from carryon_sim.harness.stand_in import stand_in_script

REPO_ID = "carryon/food_serving_demos"
STEPS_PER_INFERENCE = 8  # policy_node's default: the expert replans every 8 steps
MAX_STEPS = 600
SETTLE_STEPS = 20  # frames kept after success: the policy learns to rest there


@dataclass(frozen=True)
class DemoTask:
    """A skill demonstrated: its instruction and what is done to the scene before it starts."""

    instruction: str
    setup: Callable[[World], None] | None = None


def _lift_cover(world: World) -> None:
    world.uncover("pink_cover")


# The food scene's skills: the carrot task starts with the cover already lifted off (as in
# `carryon bench recovery`), the cover task from the scene as it is.
TASKS = {
    "put the carrot in the bowl": DemoTask("put the carrot in the bowl", _lift_cover),
    "open the pink cover": DemoTask("open the pink cover"),
}


def expert() -> Any:
    """The scripted stand-in with its injected failures (drops, slips, stalls) off."""
    config = PolicyConfig(scripted_drop_probability=0.0, scripted_slip_probability=0.0, scripted_stuck_probability=0.0)
    return BACKENDS.get("sim_scripted").make(config, None)


def randomise_lighting(world: World, rng: np.random.Generator) -> None:
    """Scale each light, the headlight and their colour a little (this episode's model only)."""
    model = world.model
    for light in range(model.nlight):
        tint = rng.uniform(0.9, 1.1, 3)
        model.light_diffuse[light] = np.clip(model.light_diffuse[light] * rng.uniform(0.6, 1.3) * tint, 0.0, 1.0)
    model.vis.headlight.ambient[:] = np.clip(model.vis.headlight.ambient * rng.uniform(0.5, 2.0), 0.0, 1.0)
    model.vis.headlight.diffuse[:] = np.clip(model.vis.headlight.diffuse * rng.uniform(0.7, 1.3), 0.0, 1.0)


def robot_state(world: World) -> np.ndarray:
    """(10,) float32: the state as lerobot_local builds it from the robot state."""
    position, rotation = world.ee_pose()
    return learned_layout.state_vector(RobotState(position, rotation, world.arm_q(), world.gripper_width()))


def demonstrate(
    task: DemoTask, seed: int, policy: Any, image_size: tuple[int, int] = layout.IMAGE_SIZE
) -> tuple[bool, list[dict[str, Any]]]:
    """One episode of the expert on `task`: (completed, frames)."""
    world = World(layout.episode_scene(seed), seed=seed)
    randomise_lighting(world, np.random.default_rng([seed, 11]))
    cameras = layout.PolicyCameras(world)
    frames: list[dict[str, Any]] = []

    def record(w: World, driver: Driver) -> None:
        frame: dict[str, Any] = dict(layout.PolicyCameras.resized(cameras(w), image_size))
        frame[layout.STATE_KEY] = robot_state(w)
        frame[layout.JOINTS_KEY] = w.arm_q().astype(np.float32)
        frame["action"] = layout.action_vector(w, driver.target)
        frame["task"] = task.instruction
        frames.append(frame)

    try:
        script = stand_in_script(task.instruction)
        result = run_episode(
            world,
            policy,
            [Task(task.instruction, script, MAX_STEPS)],
            seed,
            steps_per_inference=STEPS_PER_INFERENCE,
            settle_steps=SETTLE_STEPS,
            record=record,
            setup=task.setup,
        )
    finally:
        cameras.close()
    return result.success, frames


def record_demos(
    root: Path,
    episodes: int,
    seed: int,
    tasks: Sequence[str] = tuple(TASKS),
    *,
    image_size: tuple[int, int] = layout.IMAGE_SIZE,
    progress: Callable[[str], None] = lambda _line: None,
) -> dict[str, Any]:
    """Record `episodes` expert episodes (tasks in turn) into a new LeRobotDataset at
    `root` (must not exist); returns the summary also written to root/carryon_demos.json."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local dataset: never ask the Hub
    from carryon_policy.core.lerobot_policy import _import_lerobot

    _import_lerobot()  # torch + torchvision made importable, or PolicyUnavailable with the install hint
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if root.exists():
        raise FileExistsError(f"{root} exists: demonstrations go into a new folder")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"no demonstration for {unknown}; known: {sorted(TASKS)}")
    dataset = LeRobotDataset.create(
        repo_id=REPO_ID, fps=layout.FPS, root=root, robot_type="panda", features=features(image_size), use_videos=False
    )
    policy = expert()
    kept: dict[str, int] = dict.fromkeys(tasks, 0)
    dropped: dict[str, int] = dict.fromkeys(tasks, 0)
    frames_total = 0
    began = time.perf_counter()
    for index in range(episodes):
        instruction = tasks[index % len(tasks)]
        episode_seed = seed * 100_000 + index
        done, frames = demonstrate(TASKS[instruction], episode_seed, policy, image_size)
        if done:
            for frame in frames:
                dataset.add_frame(frame)
            dataset.save_episode()
            kept[instruction] += 1
            frames_total += len(frames)
        else:
            dropped[instruction] += 1
        outcome = "kept" if done else "dropped (the expert did not complete it)"
        progress(f"episode {index + 1}/{episodes} ({instruction!r}, seed {episode_seed}): {outcome}")
    dataset.finalize()
    summary = {
        "repo_id": REPO_ID,
        "expert": "sim_scripted (SCRIPTED STAND-IN reading simulator truth; injected failures off)",
        "episodes_run": episodes,
        "seed": seed,
        "episode_seeds": f"seed * 100000 + index, index < {episodes}",
        "kept": kept,
        "dropped": dropped,
        "frames": frames_total,
        "fps": layout.FPS,
        "image_size": list(image_size),
        "render_size": list(layout.RENDER_SIZE),
        "scene": f"{layout.SCENE_FILE} without obstacles, jitter {layout.JITTER_M} m, yaw +-{layout.YAW_DEG} deg",
        "seconds": round(time.perf_counter() - began, 1),
    }
    (root / "carryon_demos.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="new folder for the dataset")
    parser.add_argument("--episodes", type=int, default=200, help="expert episodes to run (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes (default 0)")
    parser.add_argument("--task", action="append", choices=sorted(TASKS), help="only these tasks (repeatable)")
    args = parser.parse_args(argv)
    tasks = args.task or tuple(TASKS)
    say = lambda line: print(line, file=sys.stderr)  # noqa: E731
    summary = record_demos(args.out, args.episodes, args.seed, tasks, progress=say)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
