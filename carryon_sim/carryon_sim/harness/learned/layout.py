"""The learned policy in the simulator: the interface of carryon_policy.core.learned_layout
(cameras, state, action, the serving config; re-exported here), plus what only the
simulator has: the cameras rendered as sim_node renders them (RENDER_SIZE, resized to
IMAGE_SIZE by the adapter's own `resize_image`), the randomised episodes demonstrations
and evaluations are drawn from, and where datasets and checkpoints are cached.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from carryon_policy.core import learned_layout
from carryon_policy.core.learned_layout import (
    ACTION_MAX_ABS,
    ACTION_NAMES,
    CAMERAS,
    FPS,
    IMAGE_SIZE,
    JOINTS_KEY,
    PARTS,
    STATE_KEY,
    STATE_NAMES,
    policy_config,
    remote_policy_config,
)
from carryon_policy.core.observation_mapping import resize_image
from carryon_policy.core.policy import FloatArray, ImageArray
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.scene import Scene, load_scene, scenes_dir
from carryon_sim.core.world import SCENE_CAMERA, WRIST_CAMERA, World
from carryon_sim.harness.episodes import without_obstacles

__all__ = [  # the policy interface, re-exported for the recorder, trainer and benchmarks
    "ACTION_MAX_ABS",
    "ACTION_NAMES",
    "CAMERAS",
    "FPS",
    "IMAGE_SIZE",
    "JOINTS_KEY",
    "PARTS",
    "STATE_KEY",
    "STATE_NAMES",
    "policy_config",
    "remote_policy_config",
]
RENDER_SIZE = (256, 256)  # (height, width) the cameras are rendered at, as sim_node publishes them
SIM_CAMERAS = {"scene": SCENE_CAMERA, "wrist": WRIST_CAMERA}  # camera -> MuJoCo camera (harness.observation's)

# The food-serving scene without obstacles, randomised per episode: every object that
# stands on the table shifted up to JITTER_M in x and y (what lies in or under it moves
# with it) and turned up to YAW_DEG about z. Demonstrations and evaluations draw from the
# same distribution with disjoint seeds (EVAL_SEED_BASE).
SCENE_FILE = "food_serving.yaml"
JITTER_M = 0.04
YAW_DEG = 20.0
EVAL_SEED_BASE = 1_000_000


def cache_dir() -> Path:
    """Where datasets and trained policies are kept, outside git: $CARRYON_CACHE_DIR, else
    ~/.cache/carryon (scripts/learned_policy.sh writes there)."""
    return Path(os.environ.get("CARRYON_CACHE_DIR") or Path.home() / ".cache" / "carryon")


def default_checkpoint(seed: int = 0) -> Path:
    """The policy `scripts/learned_policy.sh all` trains with SEED=`seed`."""
    return cache_dir() / "policies" / f"act_food_serving-s{seed}"


def repo_root() -> Path:
    """The source checkout this module lives in (its .venv-lerobot holds the LeRobot extra)."""
    return Path(__file__).resolve().parents[4]


def episode_scene(seed: int, base: Scene | None = None) -> Scene:
    """The randomised food scene of episode `seed` (World(scene, seed) then draws the shifts)."""
    scene = base if base is not None else without_obstacles(load_scene(scenes_dir() / SCENE_FILE))
    rng = np.random.default_rng([seed, 7])
    objects = []
    for obj in scene.spec.objects:
        update: dict[str, float] = {"yaw_deg": obj.yaw_deg + float(rng.uniform(-YAW_DEG, YAW_DEG))}
        if not (obj.under or obj.in_ or obj.offstage):
            update["jitter_m"] = JITTER_M
        objects.append(obj.model_copy(update=update))
    return Scene(scene.path, scene.spec.model_copy(update={"objects": objects}))


def action_vector(world: World, target: tuple[FloatArray, FloatArray]) -> FloatArray:
    """(10,) float32: the commanded tool target (position, rot6d) and gripper command now."""
    return learned_layout.action_vector(target[0], target[1], world.gripper_command)


class PolicyCameras:
    """Renders the cameras the learned policy reads, at RENDER_SIZE (robot camera name ->
    RGB). `resized(images)` gives them at IMAGE_SIZE under the policy's keys, as the
    adapter resizes them ('stretch'; the same sizes keep the aspect ratio)."""

    def __init__(self, world: World, size: tuple[int, int] = RENDER_SIZE) -> None:
        self.rig = CameraRig(world.model, world.object_of_body, size[1], size[0])

    def __call__(self, world: World) -> dict[str, ImageArray]:
        out = {}
        for name in dict.fromkeys(CAMERAS.values()):
            out[name] = self.rig.render(world.data, SIM_CAMERAS[name], segmentation=False, depth=False).rgb
        return out

    @staticmethod
    def resized(images: Mapping[str, ImageArray], size: tuple[int, int] = IMAGE_SIZE) -> dict[str, ImageArray]:
        return {key: resize_image(images[camera], size[0], size[1], "stretch") for key, camera in CAMERAS.items()}

    def close(self) -> None:
        self.rig.close()
