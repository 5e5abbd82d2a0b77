"""`carryon bench sim`: simulation speed, without ROS.

* physics steps/s with no rendering;
* the 20 Hz control loop (IK + physics for one control period) as real-time factor
  (simulated seconds per wall second), without a camera and with one RGB-D +
  segmentation camera at 320x240 and 640x480, rendered at sim_node's default camera
  rate (10 Hz) and, as a worst case, at every control step.

Rendering runs on Mesa's software renderer limited to one thread (LP_NUM_THREADS=1),
so the figures are for one core. Goal (issue #3): >= 3x real time at 320x240.
"""

from __future__ import annotations

import os
import time

import numpy as np

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult
from carryon_bringup.up import load_spec

CONTROL_HZ = 20.0
CAMERA_HZ = 10.0  # sim_node's default camera_rate_hz
_DOWN = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])


def run(options: BenchOptions) -> BenchResult:
    os.environ["LP_NUM_THREADS"] = "1"  # before the first GL context: one core for rendering too
    from carryon_sim.core.cameras import CameraRig
    from carryon_sim.core.ik import ArmIk
    from carryon_sim.core.scene import load_scene
    from carryon_sim.core.world import SCENE_CAMERA, World

    scene = load_scene(load_spec(None).config_dir / "scenes" / "food_serving.yaml")
    world = World(scene, seed=options.seed)
    result = BenchResult("sim", options.quick, options.seed)
    seconds = 2.0 if options.quick else 10.0

    world.reset(options.seed)
    steps = round(seconds / world.model.opt.timestep)
    started = time.perf_counter()
    world.step(seconds)
    result.add("physics_steps_per_s", steps / (time.perf_counter() - started), "steps/s", "no rendering")

    ik = ArmIk(world.model, world.robot)

    def control_loop(rig: CameraRig | None, camera_hz: float) -> float:
        world.reset(options.seed)
        n = round(seconds * CONTROL_HZ)
        every = max(1, round(CONTROL_HZ / camera_hz))
        started = time.perf_counter()
        for k in range(n):  # circle above the table, as a policy would command
            angle = 2 * np.pi * k / n
            target = np.array([0.5 + 0.1 * np.cos(angle), 0.1 * np.sin(angle), 0.65])
            world.set_arm_target(ik.solve(world.arm_q(), target, _DOWN, max_iterations=5).q)
            world.step(1.0 / CONTROL_HZ)
            if rig is not None and k % every == 0:
                rig.render(world.data, SCENE_CAMERA)
        return seconds / (time.perf_counter() - started)

    note = f"{CONTROL_HZ:.0f} Hz control, IK + physics"
    result.add("rtf_no_camera", control_loop(None, CONTROL_HZ), "x real time", note)
    for width, height in ((320, 240), (640, 480)):
        rig = CameraRig(world.model, world.object_of_body, width, height)
        try:
            rig.render(world.data, SCENE_CAMERA)  # context creation is not part of the loop
            for camera_hz in (CAMERA_HZ, CONTROL_HZ):
                rtf = control_loop(rig, camera_hz)
                note = f"one RGB-D+seg camera at {camera_hz:.0f} Hz" + (", goal >= 3" if width == 320 else "")
                result.add(f"rtf_camera_{width}x{height}_{camera_hz:.0f}hz", rtf, "x real time", note)
        finally:
            rig.close()
    result.details.update(scene=scene.name, simulated_s=seconds, lp_num_threads=1)
    return result


BENCHMARKS.register(
    "sim", Benchmark("sim", "MuJoCo world speed: physics steps/s and real-time factor with a camera", run)
)
