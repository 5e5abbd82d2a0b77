"""A tiny, randomly initialised LeRobot ACT checkpoint, built and saved locally (nothing
downloaded): for the lerobot_local tests and `carryon bench policy`. Needs the LeRobot
extra (scripts/test_lerobot_extra.sh builds a virtualenv with it).

    python -m carryon_sim.harness.fakes.tiny_act --latency 50     # JSON: seconds per inference
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

IMAGE_KEY = "observation.images.front"
STATE_KEY = "observation.state"
CHUNK = 20  # the checkpoint's chunk size


def save_tiny_act(folder: Path) -> Path:
    """Save a tiny random ACT (ResNet-18 backbone without pretrained weights, 1 encoder and
    1 decoder layer of width 32) with normalisation statistics into `folder`, like a
    trained one; returns `folder`."""
    from carryon_policy.core.lerobot_policy import _import_lerobot

    torch, _, factory = _import_lerobot()
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy

    config = ACTConfig(
        input_features={
            IMAGE_KEY: PolicyFeature(FeatureType.VISUAL, (3, 48, 64)),
            STATE_KEY: PolicyFeature(FeatureType.STATE, (8,)),
        },
        output_features={"action": PolicyFeature(FeatureType.ACTION, (7,))},
        chunk_size=CHUNK,
        n_action_steps=CHUNK,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        use_vae=False,
        pretrained_backbone_weights=None,
        device="cpu",
    )
    torch.manual_seed(0)
    policy = ACTPolicy(config)
    # Actions de-normalise to about +-3 mm per step (position), +-0.03 rad (rotation) and a
    # gripper command near 0.5, so the chunk passes the adapter's checks.
    stats = {
        IMAGE_KEY: {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)},
        STATE_KEY: {"mean": torch.zeros(8), "std": torch.ones(8)},
        "action": {
            "mean": torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5]),
            "std": torch.tensor([0.001, 0.001, 0.001, 0.01, 0.01, 0.01, 0.05]),
        },
    }
    preprocessor, postprocessor = factory.make_pre_post_processors(config, dataset_stats=stats)
    policy.save_pretrained(folder)
    preprocessor.save_pretrained(folder)
    postprocessor.save_pretrained(folder)
    return folder


def latency(calls: int) -> list[float]:
    """Seconds per `infer` of lerobot_local on the tiny ACT (one 120x160 camera), after 3
    warm-up calls."""
    from carryon_policy.core.config import PolicyConfig
    from carryon_policy.core.lerobot_policy import make_lerobot_policy
    from carryon_policy.core.policy import Observation, RobotState

    with tempfile.TemporaryDirectory() as folder:
        config = PolicyConfig.model_validate(
            {
                "backend": "lerobot_local",
                "lerobot_checkpoint_dir": str(save_tiny_act(Path(folder))),
                "vla_cameras": [f"{IMAGE_KEY}=scene"],
                "vla_state": [f"{STATE_KEY}=ee_pos+ee_rotvec+gripper_fingers"],
                "vla_action_max_abs": 1.0,
            }
        )
        policy = make_lerobot_policy(config)
        rng = np.random.default_rng(0)
        robot = RobotState(np.array([0.45, 0.0, 0.3]), np.eye(3), np.zeros(7), 0.06)
        samples = []
        policy.reset("put the carrot in the bowl", 0)
        for i in range(calls + 3):
            image = rng.integers(0, 255, (120, 160, 3), dtype=np.uint8)
            observation = Observation(observation_id=i, stamp_s=float(i), robot=robot, images={"scene": image})
            began = time.perf_counter()
            policy.infer(observation)
            samples.append(time.perf_counter() - began)
        policy.close()
    return samples[3:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--latency", type=int, default=20, metavar="CALLS", help="inferences to time")
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # LeRobot prints progress to stdout; stdout is the JSON
        samples = latency(args.latency)
    json.dump({"infer_s": samples}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
