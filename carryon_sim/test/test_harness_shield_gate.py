"""The shield in closed-loop simulated episodes (in-process MuJoCo, rendered masks): the
stand-in VLA carries the carrot straight at the bottle; the shield holds it back and
retreats upwards until the re-planned path passes over, and the task still succeeds."""

from __future__ import annotations

import pytest

from carryon_bringup.bench.policy import FOOD_TASKS, _tasks
from carryon_policy.core.backends import make_policy
from carryon_policy.core.config import PolicyConfig
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.gate import Decision
from carryon_shield.core.response import load_response_model
from carryon_sim.core.scene import load_scene, scenes_dir
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import run_episode
from carryon_sim.harness.shield_gate import SimShieldGate

pytestmark = pytest.mark.slow


def test_shield_prevents_the_bottle_contact_and_the_task_succeeds() -> None:
    tasks = _tasks(FOOD_TASKS)
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    policy = make_policy(PolicyConfig(backend="sim_scripted"))
    response, _ = load_response_model()
    unshielded = run_episode(world, policy, tasks, 0, steps_per_inference=8)
    assert any(v.touched == "bottle" for v in unshielded.violations)  # what the shield is for
    gate = SimShieldGate(world, ShieldConfig(), tasks, response)
    try:
        shielded = run_episode(world, policy, tasks, 0, steps_per_inference=8, gate=gate)
    finally:
        gate.close()
    assert shielded.violations == [] and shielded.success
    stats = gate.stats
    assert stats.count(Decision.RETREAT) > 0 and stats.count(Decision.RELEASED_PREFIX) > 0
    blocked_by = {d.blocking_obstacle for d in stats.decisions if d.first_blocked_step >= 0}
    assert "bottle" in blocked_by
    assert any(d.holding for d in stats.decisions)  # the carried carrot was checked too
