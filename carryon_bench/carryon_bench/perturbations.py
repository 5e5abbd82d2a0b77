"""The perturbations `carryon bench recovery` injects (without `--natural`): each seeded
episode gets one while the carrot is carried (held and 3 cm up):

* drop — the gripper is forced open (`World.drop`);
* displace — the carrot is pulled out of the gripper and put down 12 cm away
  (`World.displace`; paper: 12 cm displacement).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from carryon_sim.core.contacts import grasped_objects
from carryon_sim.core.scene import TABLE_TOP_Z
from carryon_sim.core.world import World

PERTURBATIONS = ("drop", "displace")


def perturbation(kind: str, seed: int) -> Callable[[World], None]:
    """Fires once, while the carrot is held 3 cm above where it was grasped."""
    rng = np.random.default_rng(seed)
    angle = float(rng.uniform(0, 2 * np.pi))
    state = {"fired": False, "grasp_z": None}

    def perturb(world: World) -> None:
        if state["fired"]:
            return
        held = "carrot" in grasped_objects(world.model, world.data, world.object_of_body)
        z = float(world.object_position("carrot")[2])
        if not held:
            return
        if state["grasp_z"] is None:
            state["grasp_z"] = z
            return
        if z < float(state["grasp_z"]) + 0.03:  # type: ignore[arg-type]
            return
        state["fired"] = True
        if kind == "drop":
            world.drop(0.5)
            return
        x, y, _ = world.object_position("carrot")
        dx, dy = 0.12 * np.cos(angle), 0.12 * np.sin(angle)
        dx = float(np.clip(x + dx, 0.35, 0.75) - x)  # stay on the table, off the robot base
        dy = float(np.clip(y + dy, -0.35, 0.35) - y)
        world.displace("carrot", dx, dy, TABLE_TOP_Z + 0.002 - z)
        world.drop(0.3)

    return perturb
