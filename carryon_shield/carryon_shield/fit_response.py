"""Fit the shield's response model from logged commanded-vs-achieved tool motion.

    python -m carryon_shield.fit_response --episodes 10 [--out config/shield/response_model.yaml]

Plays the scripted stand-in (no shield, obstacles removed) on the food-serving and
safety scenes in the in-process MuJoCo world, logs at every control step the target the
driver was commanded and the tool position reached after the step, fits the per-axis
lag (carryon_shield.core.response.fit_lag) and writes the YAML that shield_node loads.
On a real arm, log the same two streams (the released targets and ee_pose) and call
`fit_lag` on them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_policy.core.backends import make_policy
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.episodes import observe, without_obstacles
from carryon_shield.core.response import ResponseModel, fit_lag, response_model_path
from carryon_sim.core.driver import Driver
from carryon_sim.core.scene import load_scene, scenes_dir
from carryon_sim.core.world import World

RUNS = (
    ("food_serving", ("open the pink cover", "put the carrot in the bowl")),
    ("safety", ("put the cube in the bowl",)),
)


def log_motion(
    episodes: int, *, dt: float = 0.05, steps_per_inference: int = 8, max_steps: int = 300, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(commanded (T, 3), achieved (T, 3), segment (T,)) from `episodes` per scene."""
    config = PolicyConfig(backend="sim_scripted", steps_per_inference=steps_per_inference)
    policy = make_policy(config)
    commanded: list[np.ndarray] = []
    achieved: list[np.ndarray] = []
    segment: list[int] = []
    run = 0
    for scene_name, instructions in RUNS:
        world = World(without_obstacles(load_scene(scenes_dir() / f"{scene_name}.yaml")), seed=seed)
        for episode in range(seed, seed + episodes):
            world.reset(episode)
            driver = Driver(world, watchdog_s=0.25)
            for number, instruction in enumerate(instructions):
                policy.reset(instruction, episode * 100 + number)
                run += 1
                targets = np.zeros((1, 3))
                started = 0
                for step in range(max_steps):
                    if step % steps_per_inference == 0:
                        out = policy.infer(observe(world, step, step))
                        if out.convention != Convention.ABSOLUTE:
                            raise ValueError("the fit expects absolute chunks from the stand-in")
                        chunk = Chunk(
                            chunk_id=step, subtask_id=str(number), source=ChunkSource.POLICY,
                            convention=out.convention, frame_id=out.frame_id, dt=dt, observation_id=step,
                            observation_stamp_s=world.time, positions=out.positions, rotations=out.rotations,
                            gripper=out.gripper,
                        )  # fmt: skip
                        driver.submit(chunk, world.time)
                        targets, started = out.positions, step
                    rejected = len(driver.rejections)
                    driver.tick(world.time)
                    world.step(dt)
                    if len(driver.rejections) > rejected:
                        run += 1  # the arm held: a new segment
                        continue
                    commanded.append(targets[min(step - started, len(targets) - 1)].copy())
                    achieved.append(world.ee_pose()[0])
                    segment.append(run)
    return np.asarray(commanded), np.asarray(achieved), np.asarray(segment)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m carryon_shield.fit_response", description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=10, help="episodes per scene (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="first episode seed")
    parser.add_argument(
        "--out", type=Path, default=None, help="output YAML (default: config/shield/response_model.yaml)"
    )
    args = parser.parse_args(argv)
    commanded, achieved, segment = log_motion(args.episodes, seed=args.seed)
    model: ResponseModel = fit_lag(commanded, achieved, segment, dt=0.05)
    out = args.out or response_model_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    header = (
        "# Shield response model, fitted by `python -m carryon_shield.fit_response "
        f"--episodes {args.episodes} --seed {args.seed}`\n# from commanded vs achieved tool motion of the scripted "
        "stand-in in MuJoCo. x[k+1] = x[k] + alpha*(c[k]-x[k]) + beta*(x[k]-x[k-1]) per axis.\n"
    )
    out.write_text(header + model.to_yaml(), encoding="utf-8")
    print(
        f"fitted on {model.samples} steps: alpha {np.round(model.alpha, 3).tolist()}, beta "
        f"{np.round(model.beta, 3).tolist()}; one-step error {1000 * model.rmse_m:.2f} mm "
        f"(commanded = achieved: {1000 * model.baseline_rmse_m:.2f} mm) -> {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
