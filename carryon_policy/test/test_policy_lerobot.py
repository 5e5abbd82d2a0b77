"""lerobot_local with a tiny randomly initialised ACT the test builds and saves itself.

The tests that load LeRobot need the optional extra; without it they are skipped with the
reason, and `scripts/test_lerobot_extra.sh` runs them in a separate virtualenv. The
configuration and missing-extra checks run everywhere.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

from carryon_common.core.chunk import Convention
from carryon_common.core.errors import ConfigError
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.lerobot_policy import CHECKPOINT_FILES, make_lerobot_policy
from carryon_policy.core.policy import InvalidAction, MissingObservation, Observation, PolicyUnavailable, RobotState
from carryon_sim.harness.fakes.tiny_act import IMAGE_KEY, STATE_KEY

HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None and importlib.util.find_spec("torch") is not None
# Set by scripts/test_lerobot_extra.sh: there a missing extra is a failure, not a skip.
REQUIRE_LEROBOT = os.environ.get("CARRYON_REQUIRE_LEROBOT") == "1"
needs_lerobot = pytest.mark.skipif(
    not (HAVE_LEROBOT or REQUIRE_LEROBOT), reason="lerobot extra not installed; run scripts/test_lerobot_extra.sh"
)


def _config(folder: Path | str, **overrides: object) -> PolicyConfig:
    values: dict[str, object] = {
        "backend": "lerobot_local",
        "lerobot_checkpoint_dir": str(folder),
        "chunk_horizon": 12,
        "steps_per_inference": 6,
        "vla_cameras": [f"{IMAGE_KEY}=scene"],
        "vla_state": [f"{STATE_KEY}=ee_pos+ee_rotvec+gripper_fingers"],
        "vla_action_max_abs": 1.0,
    }
    values.update(overrides)
    return PolicyConfig.model_validate(values)


def _observation(images: dict[str, np.ndarray] | None = None) -> Observation:
    rng = np.random.default_rng(3)
    robot = RobotState(np.array([0.45, 0.0, 0.3]), np.eye(3), np.zeros(7), 0.06)
    if images is None:
        images = {"scene": rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)}
    return Observation(observation_id=7, stamp_s=1.0, robot=robot, images=images)


@pytest.fixture(scope="module")
def act_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from carryon_sim.harness.fakes.tiny_act import save_tiny_act

    return save_tiny_act(tmp_path_factory.mktemp("tiny_act"))


def test_a_folder_without_a_checkpoint_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(PolicyUnavailable, match=r"lacks model.safetensors, policy_preprocessor.json"):
        make_lerobot_policy(_config(tmp_path))


def test_lerobot_local_needs_a_checkpoint_dir() -> None:
    with pytest.raises(ConfigError, match="needs lerobot_checkpoint_dir"):
        make_lerobot_policy(_config(""))


@pytest.mark.skipif(HAVE_LEROBOT or REQUIRE_LEROBOT, reason="checks the message shown when the extra is missing")
def test_without_the_extra_the_error_says_how_to_install_it(tmp_path: Path) -> None:
    for name in CHECKPOINT_FILES:
        (tmp_path / name).write_text("{}")
    with pytest.raises(PolicyUnavailable, match="install the lerobot extra"):
        make_lerobot_policy(_config(tmp_path))


@needs_lerobot
def test_tiny_act_infers_a_chunk_of_end_effector_deltas(act_checkpoint: Path) -> None:
    policy = make_lerobot_policy(_config(act_checkpoint))
    try:
        assert policy.metadata.backend == "lerobot_local"
        assert policy.metadata.cameras == ("scene",)
        assert policy.metadata.convention is Convention.DELTA
        assert policy.metadata.horizon == 12
        policy.reset("put the cup on the plate", seed=1)
        out = policy.infer(_observation())
        assert out.positions.shape == (12, 3) and out.rotations.shape == (12, 3) and out.gripper.shape == (12,)
        assert np.all(np.isfinite(out.positions)) and np.all(np.isfinite(out.rotations))
        assert np.all(np.abs(out.positions) < 0.01)  # de-normalised with the saved statistics
        assert np.all((out.gripper >= 0.0) & (out.gripper <= 1.0))
        assert out.frame_id == "world"
        again = policy.infer(_observation())
        np.testing.assert_allclose(again.positions, out.positions)  # ACT without VAE sampling is deterministic
    finally:
        policy.close()


@needs_lerobot
def test_tiny_act_missing_camera_is_reported(act_checkpoint: Path) -> None:
    policy = make_lerobot_policy(_config(act_checkpoint))
    policy.reset("pick", seed=0)
    with pytest.raises(MissingObservation, match="camera 'scene'"):
        policy.infer(_observation(images={"wrist": np.zeros((48, 64, 3), np.uint8)}))


@needs_lerobot
def test_nan_weights_give_invalid_action_not_a_chunk(act_checkpoint: Path) -> None:
    import torch

    policy = make_lerobot_policy(_config(act_checkpoint))
    policy.reset("pick", seed=0)
    with torch.no_grad():
        policy.engine._policy.model.action_head.bias.fill_(float("nan"))
    with pytest.raises(InvalidAction, match="NaN"):
        policy.infer(_observation())


@needs_lerobot
def test_camera_keys_must_match_the_checkpoint(act_checkpoint: Path) -> None:
    config = _config(act_checkpoint, vla_cameras=["observation.images.top=scene"])
    with pytest.raises(ConfigError, match=r"reads images \['observation.images.front'\]"):
        make_lerobot_policy(config)


@needs_lerobot
def test_state_keys_must_match_the_checkpoint(act_checkpoint: Path) -> None:
    config = _config(act_checkpoint, vla_state=["observation.joints=joints"])
    with pytest.raises(ConfigError, match=r"reads state \['observation.state'\]"):
        make_lerobot_policy(config)
