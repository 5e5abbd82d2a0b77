"""What `carryon bench recovery --natural` adds to the rounds (bench/recovery.py): the
learned policy behind its server, and the judge the graph runs (geometric, on
carryon_perception's masks of both cameras) in place of the SIMULATOR ORACLE judge."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from carryon_bench.core.bench import BenchOptions
from carryon_bench.learned import checkpoint_of
from carryon_judge.core.backends import GeometricJudge, perception_params, rule_params, shapes_for
from carryon_judge.core.config import JudgeConfig
from carryon_policy.core.backends import BACKENDS
from carryon_policy.core.policy import Policy
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.world import World
from carryon_sim.harness.learned import layout
from carryon_sim.harness.learned.serving import checked_checkpoint, served_policy, trained_summary
from carryon_sim.harness.observation import PerceivedMasks, SimObservation, observe_world


@functools.lru_cache(maxsize=1)
def geometric_judge() -> GeometricJudge:
    """The judge judge_node runs by default: masks + depth + gripper state (stuck timeout 8 s)."""
    config = JudgeConfig(stuck_timeout_s=8.0)
    return GeometricJudge(shapes_for(config), rule_params(config), perception_params(config))


def judge_view(world: World, observation_id: int, *, rig: CameraRig, masks: PerceivedMasks) -> SimObservation:
    """Both cameras with carryon_perception's masks, for the geometric judge."""
    return observe_world(world, rig, observation_id, masks=masks)


@functools.lru_cache(maxsize=1)
def learned_policy(uri: str) -> Policy:
    """The learned policy behind its server (one connection per process), via openpi_remote."""
    return BACKENDS.get("openpi_remote").make(layout.remote_policy_config(uri), None)


@contextmanager
def learned_policy_server(options: BenchOptions) -> Iterator[tuple[str, dict[str, Any]]]:
    """The checkpoint (`make policy`'s, or --set policy_node.lerobot_checkpoint_dir) served
    while the rounds run: yields its URI and how it was trained."""
    checkpoint = checked_checkpoint(checkpoint_of(options))
    trained = trained_summary(checkpoint)
    about = {"checkpoint": str(checkpoint), **{k: trained.get(k) for k in ("steps", "train_seconds", "seed")}}
    with served_policy(checkpoint, options.run_dir / "policy_server.log") as uri:
        yield uri, about
