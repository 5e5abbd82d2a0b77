"""The geometric judge (masks + depth) and the SIMULATOR ORACLE on rendered sim states."""

from __future__ import annotations

import pytest
from judge_fixtures import OBSERVE, PLACE, UNCOVER

from carryon_judge.core.backends import GeometricJudge, perception_params, rule_params, shapes_for
from carryon_judge.core.config import JudgeConfig
from carryon_judge.core.types import JudgeRequest, VerdictStatus


@pytest.fixture(scope="module")
def sim():  # type: ignore[no-untyped-def]
    from carryon_sim.core.cameras import CameraRig
    from carryon_sim.core.scene import load_scene, scenes_dir
    from carryon_sim.core.world import World
    from carryon_sim.harness.observation import observe_world
    from carryon_sim.harness.oracle import SimOracleJudge

    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    rig = CameraRig(world.model, world.object_of_body, 240, 180)
    config = JudgeConfig(stuck_timeout_s=5.0)
    shapes = shapes_for(config)
    judges = (
        GeometricJudge(shapes, rule_params(config), perception_params(config)),
        SimOracleJudge(shapes, rule_params(config)),
    )
    yield world, (lambda i: observe_world(world, rig, i)), judges
    rig.close()


def both(judges, request):  # type: ignore[no-untyped-def]
    return [j.judge(request) for j in judges]


def test_carrot_into_bowl_next_to_it_and_a_different_object(sim) -> None:  # type: ignore[no-untyped-def]
    world, observe, judges = sim
    world.reset(0)
    world.uncover("pink_cover")
    world.step(0.5)
    baseline = observe(1)
    bx, by, _ = world.object_position("bowl")
    cx, cy, _ = world.object_position("carrot")
    world.displace("carrot", bx - cx, by - cy, 0.03)
    world.step(1.0)
    placed = both(judges, JudgeRequest(PLACE, baseline, observe(2), 3.0, 0.5))
    assert [v.status for v in placed] == [VerdictStatus.SUCCESS] * 2
    assert placed[1].backend == "sim_oracle" and placed[1].reason.startswith("SIMULATOR ORACLE")
    world.displace("carrot", 0.0, 0.15, 0.0)  # beside the bowl
    world.step(1.0)
    near = both(judges, JudgeRequest(PLACE, baseline, observe(3), 3.0, 0.5))
    assert [v.status for v in near] == [VerdictStatus.RUNNING] * 2
    late = both(judges, JudgeRequest(PLACE, baseline, observe(4), 30.0, 9.0))
    assert [v.status for v in late] == [VerdictStatus.FAILED] * 2
    mx, my, _ = world.object_position("meat")
    world.displace("meat", bx - mx, by - my, 0.03)
    world.step(1.0)
    other = both(judges, JudgeRequest(PLACE, baseline, observe(5), 3.0, 0.5))
    assert [v.status for v in other] == [VerdictStatus.RUNNING] * 2
    assert "different object (meat)" in other[0].reason


def test_cover_moved_and_revealed_contents(sim) -> None:  # type: ignore[no-untyped-def]
    world, observe, judges = sim
    world.reset(0)
    world.step(0.3)
    baseline = observe(1)
    still = both(judges, JudgeRequest(UNCOVER, baseline, observe(2), 1.0, 0.5))
    assert [v.status for v in still] == [VerdictStatus.RUNNING] * 2
    nothing = both(judges, JudgeRequest(OBSERVE, baseline, observe(3), 1.0))
    assert [v.revealed_contents for v in nothing] == [()] * 2
    world.uncover("pink_cover")
    world.step(0.5)
    current = observe(4)
    opened = both(judges, JudgeRequest(UNCOVER, baseline, current, 3.0, 0.5))
    assert [v.status for v in opened] == [VerdictStatus.SUCCESS] * 2
    seen = both(judges, JudgeRequest(OBSERVE, baseline, current, 3.0))
    assert [v.revealed_contents for v in seen] == [("carrot",)] * 2
    assert all(v.scene_update_required for v in seen)


def test_missing_geometry_or_truth_is_unable_to_judge(sim) -> None:  # type: ignore[no-untyped-def]
    from carryon_judge.core.types import Observation

    _, _, judges = sim
    bare = Observation(9, 0.0)
    verdicts = both(judges, JudgeRequest(PLACE, bare, bare, 1.0))
    assert [v.status for v in verdicts] == [VerdictStatus.UNABLE_TO_JUDGE] * 2
    assert "no camera with depth" in verdicts[0].reason and "ground truth" in verdicts[1].reason


def test_the_robot_profiles_object_file_is_found_from_any_working_directory(tmp_path, monkeypatch, config_dir) -> None:  # type: ignore[no-untyped-def]
    """geometry_file is relative to the config folder, as on a robot PC started elsewhere."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CARRYON_CONFIG_DIR", str(config_dir))
    shapes = shapes_for(JudgeConfig(geometry_file="judge/objects.yaml"))
    assert shapes == shapes_for(JudgeConfig(geometry_file=str(config_dir / "judge" / "objects.yaml")))
    assert "carrot" in shapes.shapes
