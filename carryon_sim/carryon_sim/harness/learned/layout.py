"""The learned policy's interface, shared by the demonstration recorder, the trainer and
the benchmarks: which cameras it reads, what its state and action vectors hold, and the
`lerobot_local` configuration that serves a checkpoint trained on them.

Images: the scene and wrist cameras, rendered as sim_node renders them (RENDER_SIZE) and
resized by the policy adapter's own `resize_image` to IMAGE_SIZE, so training and
serving see the same pixels. State (10): tool position (m), orientation as the first two
columns of its rotation matrix (rot6d), gripper closedness (0 open .. 1 closed). Action
(10) per control step: the absolute tool target the arm is commanded to (position,
rot6d) and the gripper command (0 open .. 1 closed); `ee_absolute` in the robot's base
frame. Absolute targets suit LeRobot's dataset, where a chunk is the next frames' actions
(a pose relative to each frame's own observation would not compose into one chunk), and
rot6d has no wrap-around near the downward-pointing tool (a rotation vector there sits
at |w| = pi).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from carryon_policy.core import rotations
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.observation_mapping import resize_image
from carryon_policy.core.policy import FloatArray, ImageArray
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.scene import Scene, load_scene, scenes_dir
from carryon_sim.core.world import SCENE_CAMERA, WRIST_CAMERA, World
from carryon_sim.harness.episodes import without_obstacles

FPS = 20  # the control rate (PolicyConfig.control_rate_hz): one dataset frame per control step
RENDER_SIZE = (256, 256)  # (height, width) the cameras are rendered at, as sim_node publishes them
IMAGE_SIZE = (96, 96)  # (height, width) the policy reads
CAMERAS = {"observation.images.scene": "scene", "observation.images.wrist": "wrist"}  # policy key -> camera
SIM_CAMERAS = {"scene": SCENE_CAMERA, "wrist": WRIST_CAMERA}  # camera -> MuJoCo camera (harness.observation's)
STATE_KEY = "observation.state"
PARTS = ("ee_pos", "ee_rot6d", "gripper")
STATE_NAMES = ("x", "y", "z", "r11", "r21", "r31", "r12", "r22", "r32", "gripper")
ACTION_NAMES = ("x", "y", "z", "r11", "r21", "r31", "r12", "r22", "r32", "gripper")
# No learned action may leave this box (metres, unit rot6d, [0, 1] gripper): a chunk beyond
# it is dropped by the adapter (vla_action_max_abs).
ACTION_MAX_ABS = 1.5

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


def policy_config(checkpoint_dir: Path | str, **overrides: object) -> PolicyConfig:
    """policy_node's configuration for a checkpoint trained on this layout (lerobot_local)."""
    values: dict[str, object] = {
        "backend": "lerobot_local",
        "lerobot_checkpoint_dir": str(checkpoint_dir),
        "cameras": list(dict.fromkeys(CAMERAS.values())),
        "vla_cameras": [f"{key}={camera}" for key, camera in CAMERAS.items()],
        "vla_image_resize": "stretch",
        "vla_state": [f"{STATE_KEY}={'+'.join(PARTS)}"],
        "vla_action_convention": "ee_absolute",
        "vla_action_layout": list(PARTS),
        "vla_action_max_abs": ACTION_MAX_ABS,
        "vla_gripper_open": 0.0,
        "vla_gripper_closed": 1.0,
    }
    values.update(overrides)
    return PolicyConfig.model_validate(values)


def remote_policy_config(uri: str, **overrides: object) -> PolicyConfig:
    """policy_node's configuration for the same checkpoint behind carryon_policy.lerobot_server
    (openpi_remote): the client resizes the images to IMAGE_SIZE as lerobot_local would."""
    values: dict[str, object] = {
        "backend": "openpi_remote",
        "remote_uri": uri,
        "remote_prompt_key": "prompt",
        "vla_image_size": list(IMAGE_SIZE),
    }
    values.update(overrides)
    local = policy_config("unused").model_dump(exclude={"backend", "lerobot_checkpoint_dir"})
    return PolicyConfig.model_validate({**local, **values})


def action_vector(world: World, target: tuple[FloatArray, FloatArray]) -> FloatArray:
    """(10,) float32: the commanded tool target (position, rot6d) and gripper command now."""
    position, rotation = target
    return np.concatenate([position, rotations.matrix_to_rot6d(rotation), [world.gripper_command]]).astype(np.float32)


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
