"""The in-process shield gate (SimShieldGate) on the MuJoCo world.

- Masks from perception (the default, what the graph does: carryon_perception on the
  rendered colour + depth) and from the SIMULATOR ORACLE (`sim_truth`, an ablation): either
  way a clear chunk is released whole and one aimed into the bottle is held back, the
  bottle named; an unknown mask source is refused; a scene the planner has no locations
  file for (a test's own) is perceived too.
- Closed-loop episodes, with perception's masks and with the oracle's: the stand-in VLA
  carries the carrot straight at the bottle; the shield holds it back and retreats upwards
  until the re-planned path passes over, and the task still succeeds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from carryon_bench.policy import FOOD_TASKS, _tasks
from carryon_common.core.chunk import Chunk, ChunkSource, Convention
from carryon_policy.core.backends import make_policy
from carryon_policy.core.config import PolicyConfig
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.gate import Decision
from carryon_shield.core.response import load_response_model
from carryon_sim.core.scene import LocationSpec, ObjectSpec, Scene, SceneSpec, load_scene, scenes_dir
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import run_episode
from carryon_sim.harness.shield_gate import SimShieldGate

STEPS = 16


def _line_chunk(world: World, chunk_id: int, end: tuple[float, float, float]) -> Chunk:
    """STEPS absolute steps from the tool's position straight to `end`, orientation held,
    gripper open; subtask 0 (open the pink cover), observed now."""
    start, rotation = world.ee_pose()
    fractions = (np.arange(STEPS) + 1)[:, None] / STEPS
    positions = start + fractions * (np.asarray(end) - start)
    rotvec = Rotation.from_matrix(rotation).as_rotvec()
    return Chunk(
        chunk_id,
        "0",
        ChunkSource.POLICY,
        Convention.ABSOLUTE,
        "world",
        0.05,
        chunk_id,
        world.time,
        positions,
        np.tile(rotvec, (STEPS, 1)),
        np.zeros(STEPS),
    )


@pytest.mark.parametrize("masks", ["perception", "sim_truth"])
def test_gate_releases_a_clear_chunk_and_holds_back_one_into_the_bottle(masks: str) -> None:
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    response, _ = load_response_model()
    gate = SimShieldGate(world, ShieldConfig(), _tasks(FOOD_TASKS), response, masks=masks)
    try:
        gate.reset()
        start, _ = world.ee_pose()  # home: above the table, well clear of everything
        clear = gate(_line_chunk(world, 1, (start[0] - 0.05, start[1] + 0.05, start[2] + 0.02)), world)
        into_bottle = gate(_line_chunk(world, 2, (0.55, 0.02, 0.52)), world)  # the bottle stands at (0.55, 0.02)
    finally:
        gate.close()
    first, second = gate.stats.decisions
    assert first.decision == Decision.RELEASED_ALL and clear is not None and len(clear) == STEPS
    assert second.decision in (Decision.RELEASED_PREFIX, Decision.RETREAT), second.reason
    assert second.blocking_obstacle == "bottle"
    assert into_bottle is None or second.released_steps < STEPS
    frames = gate.perception.frames
    assert set(frames) == {"scene", "wrist"}
    labels = set(frames["scene"].labels.values()) | set(frames["wrist"].labels.values())
    assert {"bottle", "pink_cover", "bowl"} <= labels
    assert gate.config.grounder == {"perception": "masks", "sim_truth": "sim_truth"}[masks]
    if masks == "perception":  # perception's ids and labels (robot 1, table 2), timed on their own
        assert {"robot", "table"} <= labels
        assert len(gate.stats.perception_s) == 2 and all(s > 0 for s in gate.stats.perception_s)
        assert gate.diagnostics == []
        tracker, labeller = gate.scene_perception.tracker, gate.scene_perception.labeller  # type: ignore[union-attr]
        gate.reset()  # a new episode: tracks restart, the catalog and self-filter are kept
        assert gate.scene_perception is not None
        assert gate.scene_perception.tracker is not tracker and gate.scene_perception.labeller is labeller
    else:
        assert gate.stats.perception_s == [] and gate.scene_perception is None


def test_an_unknown_mask_source_is_refused() -> None:
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    response, _ = load_response_model()
    with pytest.raises(ValueError, match=r"perception.*sim_truth"):
        SimShieldGate(world, ShieldConfig(), _tasks(FOOD_TASKS), response, masks="truth")


def test_a_scene_without_a_planner_locations_file_is_perceived_with_its_own_regions() -> None:
    objects = [ObjectSpec(name="pink_cover", type="cover", pos=(0.6, 0.2)),
               ObjectSpec(name="bowl", type="bowl", pos=(0.55, -0.3))]  # fmt: skip
    regions = {"counter": LocationSpec(center=(0.6, 0.2), size=(0.3, 0.3))}
    spec = SceneSpec(name="ad_hoc", description="test", objects=objects, locations=regions)
    world = World(Scene(Path("ad_hoc.yaml"), spec))
    response, _ = load_response_model()
    gate = SimShieldGate(world, ShieldConfig(), [], response)
    try:
        gate.observe(world.time)
    finally:
        gate.close()
    assert gate.scene_perception is not None and set(gate.scene_perception.locations) == {"counter"}
    assert {"pink_cover", "bowl", "robot", "table"} <= set(gate.perception.frames["scene"].labels.values())


@pytest.mark.slow
@pytest.mark.parametrize("masks", ["perception", "sim_truth"])
def test_shield_prevents_the_bottle_contact_and_the_task_succeeds(masks: str) -> None:
    """With perception's masks (the graph's) and with the SIMULATOR ORACLE's (the ablation:
    what the shield does when it sees every object correctly)."""
    tasks = _tasks(FOOD_TASKS)
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    policy = make_policy(PolicyConfig(backend="sim_scripted"))
    response, _ = load_response_model()
    if masks == "sim_truth":  # once is enough
        unshielded = run_episode(world, policy, tasks, 0, steps_per_inference=8)
        assert any(v.touched == "bottle" for v in unshielded.violations)  # what the shield is for
    gate = SimShieldGate(world, ShieldConfig(), tasks, response, masks=masks)
    try:
        gate.reset()
        shielded = run_episode(world, policy, tasks, 0, steps_per_inference=8, gate=gate)
    finally:
        gate.close()
    assert shielded.violations == [] and shielded.success
    stats = gate.stats
    assert stats.count(Decision.RETREAT) > 0 and stats.count(Decision.RELEASED_PREFIX) > 0
    blocked_by = {d.blocking_obstacle for d in stats.decisions if d.first_blocked_step >= 0}
    assert "bottle" in blocked_by
    assert any(d.holding for d in stats.decisions)  # the carried carrot was checked too
    assert len(stats.perception_s) == (len(stats.decisions) if masks == "perception" else 0)
