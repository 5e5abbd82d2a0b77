"""Moving the simulated arm in tests without ROS: a small world, straight-line tool moves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from carryon_sim.core.contacts import ContactMonitor
from carryon_sim.core.ik import ArmIk
from carryon_sim.core.scene import ObjectSpec, Scene, SceneSpec
from carryon_sim.core.world import World

ACROSS_X = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])  # down, fingers closing along world y


def shift(point: np.ndarray, dx: float, dy: float, dz: float) -> np.ndarray:
    return point + np.array([dx, dy, dz])


def small_world(objects: list[dict[str, Any]]) -> World:
    """A table with only `objects` (ObjectSpec fields, e.g. {"name": "carrot", "type": "carrot", "pos": ...})."""
    specs = [ObjectSpec.model_validate(o) for o in objects]
    return World(Scene(Path("test.yaml"), SceneSpec(name="test", description="test", objects=specs)))


def carrot_world(extra: list[dict[str, Any]] | None = None) -> World:
    """A carrot at (0.55, 0.1) and `extra` objects."""
    return small_world([{"name": "carrot", "type": "carrot", "pos": (0.55, 0.1)}, *(extra or [])])


def move(
    world: World, ik: ArmIk, target: np.ndarray, grip: float, seconds: float, monitor: ContactMonitor | None = None
) -> None:
    """Straight-line tool motion in 20 IK waypoints, like a policy's chunk; `grip` 0 open .. 1 closed."""
    start = world.ee_pose()[0]
    for k in range(1, 21):
        world.set_arm_target(ik.solve(world.arm_q(), start + (target - start) * k / 20, ACROSS_X).q)
        world.set_gripper(grip)
        world.step(seconds / 20)
        if monitor is not None:
            monitor.update(world.model, world.data, world.object_of_body)
