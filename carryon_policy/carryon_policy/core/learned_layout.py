"""The learned policy's interface, robot side: what its dataset frames hold and the
policy_node configuration that serves a checkpoint trained on them. Shared by the
simulator's demonstration recorder (carryon_sim.harness.learned), the converter of
recorder_node bags (carryon_policy.bag_dataset) and the benchmarks; nothing here knows
the simulator.

Images: the scene and wrist cameras, resized by the policy adapter's own `resize_image`
to IMAGE_SIZE, so training and serving see the same pixels. State (10): tool position
(m), orientation as the first two columns of its rotation matrix (rot6d), gripper
closedness (0 open .. 1 closed). Action (10) per control step: the absolute tool target
the arm is commanded to (position, rot6d) and the gripper command (0 open .. 1 closed);
`ee_absolute` in the robot's base frame. Absolute targets suit LeRobot's dataset, where a
chunk is the next frames' actions (a pose relative to each frame's own observation would
not compose into one chunk), and rot6d has no wrap-around near the downward-pointing tool
(a rotation vector there sits at |w| = pi). The arm's joint positions are kept too
(JOINTS_KEY), outside LeRobot's `observation.*` keys so they are data, not a policy input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from carryon_policy.core import rotations
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.observation_mapping import state_part
from carryon_policy.core.policy import FloatArray, RobotState

FPS = 20  # the control rate (PolicyConfig.control_rate_hz): one dataset frame per control step
IMAGE_SIZE = (96, 96)  # (height, width) the policy reads
CAMERAS = {"observation.images.scene": "scene", "observation.images.wrist": "wrist"}  # policy key -> camera
STATE_KEY = "observation.state"
PARTS = ("ee_pos", "ee_rot6d", "gripper")
STATE_NAMES = ("x", "y", "z", "r11", "r21", "r31", "r12", "r22", "r32", "gripper")
ACTION_NAMES = ("x", "y", "z", "r11", "r21", "r31", "r12", "r22", "r32", "gripper")
JOINTS_KEY = "joint_positions"  # the arm's joints, radians (not an observation.* key: no policy input)
ARM_JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8))
# No learned action may leave this box (metres, unit rot6d, [0, 1] gripper): a chunk beyond
# it is dropped by the adapter (vla_action_max_abs).
ACTION_MAX_ABS = 1.5


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


# The serving config's gripper normalisation, read once (not per frame).
GRIPPER_MAX_WIDTH_M = policy_config("unused").vla_gripper_max_width_m


def features(image_size: tuple[int, int] = IMAGE_SIZE) -> dict[str, dict[str, Any]]:
    """A dataset's features (LeRobot's feature dict)."""
    height, width = image_size
    out: dict[str, dict[str, Any]] = {
        key: {"dtype": "image", "shape": (height, width, 3), "names": ["height", "width", "channels"]}
        for key in CAMERAS
    }
    out[STATE_KEY] = {"dtype": "float32", "shape": (len(STATE_NAMES),), "names": list(STATE_NAMES)}
    out[JOINTS_KEY] = {"dtype": "float32", "shape": (len(ARM_JOINTS),), "names": list(ARM_JOINTS)}
    out["action"] = {"dtype": "float32", "shape": (len(ACTION_NAMES),), "names": list(ACTION_NAMES)}
    return out


def state_vector(robot: RobotState) -> FloatArray:
    """(10,) float32: the state as lerobot_local builds it from the robot state (`state_part`)."""
    return np.concatenate([state_part(robot, p, GRIPPER_MAX_WIDTH_M) for p in PARTS]).astype(np.float32)


def action_vector(position: FloatArray, rotation: FloatArray, gripper: float) -> FloatArray:
    """(10,) float32: a commanded tool target (position, rotation matrix) and gripper command."""
    return np.concatenate([position, rotations.matrix_to_rot6d(rotation), [gripper]]).astype(np.float32)
