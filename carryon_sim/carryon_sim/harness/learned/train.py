"""Train the learned policy (LeRobot ACT) on recorded demonstrations, with LeRobot's own
trainer (`lerobot-train`), and save the checkpoint lerobot_local serves.

The policy reads both cameras and the robot state (layout.py) and predicts a chunk of 16
absolute tool targets; its ResNet-18 backbone starts from random weights (nothing is
downloaded). Sized for the 2-core development machine: ~0.8 s per step at batch 16 and
96x96 images (measured), so the default 3500 steps take about 46 minutes; on a GPU pass
`--device cuda` and more steps. Seeded through LeRobot's `--seed` (not checked bit for bit).

    python -m carryon_sim.harness.learned.train --dataset DIR --out DIR [--steps 3500] [--seed 0]

Writes DIR/ (config.json, model.safetensors, the pre/post-processors with their
normalisation statistics: what lerobot_local loads), DIR/carryon_policy.json (how it was
trained: dataset, steps, seconds, final loss, inference time per chunk on one CPU thread)
and DIR/train.log. Needs the LeRobot extra (.venv-lerobot).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from carryon_sim.harness.learned import layout
from carryon_sim.harness.learned.record import REPO_ID

# ACT sized for CPU training (LeRobot's defaults otherwise): a 16-step chunk as policy_node
# executes it (chunk_horizon 16, 8 steps per inference), a narrower feed-forward (1024 for
# 3200) and a learning rate for training from scratch (1e-4; ACT's preset 1e-5 fine-tunes
# a pretrained backbone).
ACT_ARGS = {
    "policy.type": "act",
    "policy.chunk_size": "16",
    "policy.n_action_steps": "16",
    "policy.pretrained_backbone_weights": "null",
    "policy.dim_model": "256",
    "policy.dim_feedforward": "1024",
    "policy.n_encoder_layers": "4",
    "policy.n_decoder_layers": "1",
    "policy.optimizer_lr": "1e-4",
    "policy.optimizer_lr_backbone": "1e-4",
    "policy.push_to_hub": "false",
}
# A tiny network for tests and CI: the same pipeline, seconds to train, useless as a policy.
TINY_ARGS = {
    "policy.dim_model": "32",
    "policy.n_heads": "2",
    "policy.dim_feedforward": "64",
    "policy.n_encoder_layers": "1",
    "policy.n_vae_encoder_layers": "1",
    "policy.latent_dim": "8",
}
CHECKPOINT = "checkpoints/last/pretrained_model"
_LOSS = re.compile(r"step:(\S+) .*?loss:(\S+)")


def lerobot_train_args(
    dataset: Path, output: Path, *, steps: int, seed: int, batch_size: int, device: str, tiny: bool
) -> list[str]:
    """The command line of `lerobot-train` for these settings."""
    values = {
        "dataset.repo_id": REPO_ID,
        "dataset.root": str(dataset),
        **ACT_ARGS,
        **(TINY_ARGS if tiny else {}),
        "policy.device": device,
        "steps": str(steps),
        "batch_size": str(batch_size),
        "seed": str(seed),
        "num_workers": "1",
        "save_freq": str(steps),
        "log_freq": str(max(1, min(100, steps // 10))),
        "eval_freq": "0",
        "wandb.enable": "false",
        "output_dir": str(output),
    }
    return [f"--{key}={value}" for key, value in values.items()]


def _run_lerobot_train(args: list[str], log: Path) -> None:
    """`lerobot-train ARGS` in a child process (torchvision made importable first), its
    output teed into `log`. Raises RuntimeError with the log's tail when it fails."""
    code = (
        "import sys; from carryon_policy.core.lerobot_policy import _import_lerobot; _import_lerobot(); "
        "from lerobot.scripts.lerobot_train import main; sys.argv = ['lerobot-train', *sys.argv[1:]]; main()"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    with log.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            if "loss:" in line or "Error" in line:
                print(line.rstrip(), file=sys.stderr)
        rc = process.wait()
    if rc != 0:
        tail = "".join(log.read_text(encoding="utf-8").splitlines(keepends=True)[-20:])
        raise RuntimeError(f"lerobot-train failed (exit {rc}); the end of {log}:\n{tail}")


def inference_seconds(checkpoint: Path, calls: int = 20) -> list[float]:
    """Seconds per chunk of lerobot_local on `checkpoint`, one CPU thread, after 3 warm-up
    calls (images at the rendered size, resized by the adapter as in the loop)."""
    from carryon_policy.core.lerobot_policy import _import_lerobot, make_lerobot_policy
    from carryon_policy.core.policy import Observation, RobotState

    torch, _, _ = _import_lerobot()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = make_lerobot_policy(layout.policy_config(checkpoint))
        rng = np.random.default_rng(0)
        robot = RobotState(np.array([0.47, 0.0, 0.82]), np.diag([1.0, -1.0, -1.0]), np.zeros(7), 0.08)
        policy.reset("put the carrot in the bowl", 0)
        samples = []
        for i in range(calls + 3):
            images = {
                camera: rng.integers(0, 255, (*layout.RENDER_SIZE, 3), dtype=np.uint8)
                for camera in layout.CAMERAS.values()
            }
            began = time.perf_counter()
            policy.infer(Observation(observation_id=i, stamp_s=float(i), robot=robot, images=images))
            samples.append(time.perf_counter() - began)
        policy.close()
    finally:
        torch.set_num_threads(threads)
    return samples[3:]


def train(
    dataset: Path,
    out: Path,
    *,
    steps: int,
    seed: int,
    batch_size: int = 16,
    device: str = "cpu",
    tiny: bool = False,
) -> dict[str, Any]:
    """Train, then save the checkpoint into `out` (replaced when it exists); returns the
    summary written to out/carryon_policy.json."""
    if not (dataset / "meta" / "info.json").is_file():
        raise FileNotFoundError(f"{dataset} is not a LeRobot dataset (no meta/info.json): record one first")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="carryon-train-", dir=out.parent) as work:
        run = Path(work) / "run"  # lerobot-train wants an output folder that does not exist yet
        log = Path(work) / "train.log"
        args = lerobot_train_args(dataset, run, steps=steps, seed=seed, batch_size=batch_size, device=device, tiny=tiny)
        began = time.perf_counter()
        _run_lerobot_train(args, log)
        seconds = time.perf_counter() - began
        losses = [(m.group(1), float(m.group(2))) for m in _LOSS.finditer(log.read_text(encoding="utf-8"))]
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(run / CHECKPOINT, out)
        shutil.copy(log, out / "train.log")
    demos = dataset / "carryon_demos.json"
    infer = inference_seconds(out)
    summary = {
        "policy": "LeRobot ACT (ResNet-18 from random weights), " + ("TINY (tests only)" if tiny else "CarryOn's size"),
        "dataset": str(dataset),
        "demonstrations": json.loads(demos.read_text(encoding="utf-8")) if demos.is_file() else None,
        "lerobot_train_args": args,
        "steps": steps,
        "batch_size": batch_size,
        "seed": seed,
        "device": device,
        "train_seconds": round(seconds, 1),
        "loss_log": losses,
        "final_loss": losses[-1][1] if losses else None,
        "inference_s_per_chunk_1_thread": {
            "p50": float(np.percentile(infer, 50)),
            "p99": float(np.percentile(infer, 99)),
            "calls": len(infer),
        },
    }
    (out / "carryon_policy.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True, help="the LeRobotDataset folder (record.py)")
    parser.add_argument("--out", type=Path, required=True, help="checkpoint folder (replaced)")
    parser.add_argument("--steps", type=int, default=3500, help="training steps (default 3500, ~46 min on 2 cores)")
    parser.add_argument("--seed", type=int, default=0, help="training seed (default 0)")
    parser.add_argument("--batch-size", type=int, default=16, help="batch size (default 16)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--tiny", action="store_true", help="a tiny network: the pipeline for tests, not a policy")
    args = parser.parse_args(argv)
    summary = train(
        args.dataset,
        args.out,
        steps=args.steps,
        seed=args.seed,
        batch_size=args.batch_size,
        device=args.device,
        tiny=args.tiny,
    )
    print(json.dumps({k: v for k, v in summary.items() if k != "loss_log"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
