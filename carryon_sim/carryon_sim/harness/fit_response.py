"""Fit the shield's response model from logged commanded-vs-achieved tool motion.

    python -m carryon_sim.harness.fit_response --episodes 10 [--out config/shield/response_model.yaml]

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

from carryon_common.core.chunk import Chunk, Convention
from carryon_policy.core.backends import make_policy
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.policy import InvalidAction, Observation
from carryon_policy.core.runner import ChunkRunner, RunProgress
from carryon_policy.core.timing import InferenceRecord
from carryon_shield.core.response import ResponseModel, fit_lag, response_model_path
from carryon_sim.core.driver import Driver
from carryon_sim.core.scene import load_scene, scenes_dir
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import observe, without_obstacles

RUNS = (
    ("food_serving", ("open the pink cover", "put the carrot in the bowl")),
    ("safety", ("put the cube in the bowl",)),
)


class _MotionLog:
    """ChunkPort of the fit: the stand-in's chunks straight to the driver, one physics step
    per control step, logging the commanded target and the tool position reached."""

    def __init__(self, world: World, dt: float) -> None:
        self.world, self.dt = world, dt
        self.driver = Driver(world, watchdog_s=0.25)
        self.commanded: list[np.ndarray] = []
        self.achieved: list[np.ndarray] = []
        self.segment: list[int] = []
        self.run = 0  # segment number: a new one per task and whenever the arm held
        self.targets = np.zeros((1, 3))

    def observe(self, steps_executed: int) -> tuple[float, Observation]:
        return self.world.time, observe(self.world, steps_executed, steps_executed)

    def send(self, chunk: Chunk, record: InferenceRecord) -> None:  # noqa: ARG002 - timing is not fitted
        if chunk.convention != Convention.ABSOLUTE:
            raise ValueError("the fit expects absolute chunks from the stand-in")
        self.driver.submit(chunk, self.world.time)
        self.targets = chunk.positions

    def dropped(self, error: InvalidAction) -> None:
        raise error

    def skip(self) -> None:
        raise AssertionError("unreachable: dropped() raises")

    def advance(self, steps: int, progress: RunProgress) -> bool:  # noqa: ARG002 - logs per step, not per run
        for k in range(steps):
            rejected = len(self.driver.rejections)
            self.driver.tick(self.world.time)
            self.world.step(self.dt)
            if len(self.driver.rejections) > rejected:
                self.run += 1  # the arm held: a new segment
                continue
            self.commanded.append(self.targets[min(k, len(self.targets) - 1)].copy())
            self.achieved.append(self.world.ee_pose()[0])
            self.segment.append(self.run)
        return False  # the whole budget runs, success or not


def log_motion(
    episodes: int, *, dt: float = 0.05, steps_per_inference: int = 8, max_steps: int = 300, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(commanded (T, 3), achieved (T, 3), segment (T,)) from `episodes` per scene."""
    config = PolicyConfig(backend="sim_scripted", steps_per_inference=steps_per_inference)
    policy = make_policy(config)
    logs: list[_MotionLog] = []
    run = 0
    for scene_name, instructions in RUNS:
        world = World(without_obstacles(load_scene(scenes_dir() / f"{scene_name}.yaml")), seed=seed)
        for episode in range(seed, seed + episodes):
            world.reset(episode)
            log = _MotionLog(world, dt)
            log.run = run
            for number, instruction in enumerate(instructions):
                policy.reset(instruction, episode * 100 + number)
                log.run += 1
                log.targets = np.zeros((1, 3))
                runner = ChunkRunner(policy, dt=dt, steps_per_inference=steps_per_inference, subtask_id=str(number))
                runner.run(log, max_steps)
            run = log.run
            logs.append(log)
    return (
        np.asarray([c for log in logs for c in log.commanded]),
        np.asarray([a for log in logs for a in log.achieved]),
        np.asarray([s for log in logs for s in log.segment]),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m carryon_sim.harness.fit_response", description=__doc__.split("\n")[0]
    )
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
        "# Shield response model, fitted by `python -m carryon_sim.harness.fit_response "
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
