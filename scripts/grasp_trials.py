"""Trials of the base re-grasp skill alone, in the simulator: the carrot at random poses on
the kitchen counter (the cover set aside, as after the demo's step 2), the skill run once
per pose without the shield, re-localising from the simulator's own masks (an ORACLE, so
that only the grasp is measured). Prints how many attempts carried the carrot to the
bowl's stand-off (RESUME) per tool-centre-point height above the table.

    python scripts/grasp_trials.py --heights 0.008,0.016 --poses 20 --first-seed 0
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import mujoco
import numpy as np

from carryon_recovery.core.base_skill import run_base_skill
from carryon_recovery.core.library import SkillLibrary, SkillVersion
from carryon_recovery.core.motion import builtin_motion
from carryon_recovery.core.types import Outcome
from carryon_robot.core.kinematics import load_robot
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.driver import Driver
from carryon_sim.core.scene import load_scene
from carryon_sim.core.world import World
from carryon_sim.harness.recovery_io import SimRecoveryIO

CONFIG = Path(__file__).resolve().parents[1] / "config"


def with_height(version: SkillVersion, height_m: float) -> SkillVersion:
    parameters = dict(version.parameters)
    parameters["grasp_height_m"] = parameters["grasp_height_m"].model_copy(update={"value": height_m})
    return version.model_copy(update={"parameters": parameters})


def carrot_at_random(seed: int) -> World:
    """The food scene, cover set aside, carrot moved up to 3 cm and turned at random."""
    rng = np.random.default_rng(seed)
    world = World(load_scene(CONFIG / "scenes" / "food_serving.yaml"), seed=0)
    world.uncover("pink_cover")
    world.displace("carrot", rng.uniform(-0.03, 0.03), rng.uniform(-0.03, 0.0))
    body = world.model.body("carrot")
    address = world.model.jnt_qposadr[body.jntadr[0]]
    yaw = rng.uniform(-math.pi, math.pi)
    turned = np.zeros(4)
    mujoco.mju_mulQuat(
        turned,
        np.array([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]),
        world.data.qpos[address + 3 : address + 7].copy(),
    )
    world.data.qpos[address + 3 : address + 7] = turned
    mujoco.mj_forward(world.model, world.data)
    world.step(1.0)
    return world


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heights", default="0.008", help="grasp_height_m values, comma-separated (metres)")
    parser.add_argument("--poses", type=int, default=20, help="carrot poses per height")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first pose")
    args = parser.parse_args()
    motion = builtin_motion(load_robot(str(CONFIG / "robot" / "panda.yaml")))
    base = SkillLibrary(CONFIG / "skills" / "recovery").load("regrasp", 1)
    for height in (float(h) for h in args.heights.split(",")):
        version, carried, began = with_height(base, height), 0, time.monotonic()
        for seed in range(args.first_seed, args.first_seed + args.poses):
            world = carrot_at_random(seed)
            rig = CameraRig(world.model, world.object_of_body, 256, 256)
            try:
                io = SimRecoveryIO(world, Driver(world, 0.5), rig, motion)
                result = run_base_skill(
                    version,
                    io,
                    target="carrot",
                    destination="bowl",
                    instruction="serve",
                    pre_failure=world.ee_pose()[0],
                )
            finally:
                rig.close()
            carried += result.outcome == Outcome.RESUME
            ops = " ".join(f"{op.op}{'' if op.ok else '!'}" for op in result.attempt.operations)
            print(f"  height {height:.3f} seed {seed}: {result.outcome.name}  {ops}")
        took = time.monotonic() - began
        print(f"grasp_height_m {height:.3f}: {carried}/{args.poses} carried to the stand-off ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
