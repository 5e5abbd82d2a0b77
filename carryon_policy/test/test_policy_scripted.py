"""The scripted stand-in on the simulated world (in-process, no ROS)."""

from __future__ import annotations

import numpy as np
import pytest

from carryon_policy.core.backends import BACKENDS
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.episodes import Task, observe, run_episode, without_obstacles
from carryon_policy.core.policy import MissingObservation, UnknownInstruction
from carryon_policy.core.scripted import ScriptedParams, ScriptedPolicy
from carryon_policy.core.sim_geometry import scene_geometry
from carryon_policy.core.skills import SkillLibrary, load_skill_library, skills_path
from carryon_sim.core.scene import load_scene, scenes_dir
from carryon_sim.core.world import World

NO_FAILURES = {"drop_probability": 0.0, "slip_probability": 0.0, "stuck_probability": 0.0}


@pytest.fixture(scope="module")
def library() -> SkillLibrary:
    return load_skill_library(skills_path())


@pytest.fixture(scope="module")
def food_world() -> World:
    return World(without_obstacles(load_scene(scenes_dir() / "food_serving.yaml")), seed=0)


def stand_in(library: SkillLibrary, **params: float) -> ScriptedPolicy:
    return ScriptedPolicy(library, scene_geometry(scenes_dir()), ScriptedParams(**params))  # type: ignore[arg-type]


def tasks(library: SkillLibrary, *instructions: str) -> list[Task]:
    out = []
    for instruction in instructions:
        skill = library.find(instruction)
        assert skill is not None and skill.script is not None
        out.append(Task(instruction, skill.script, 400))
    return out


def test_unknown_instruction_is_refused_with_the_known_skills(library: SkillLibrary) -> None:
    policy = stand_in(library)
    with pytest.raises(UnknownInstruction) as info:
        policy.reset("make me a sandwich", 0)
    assert "'open the pink cover'" in str(info.value) and "'put the carrot in the bowl'" in str(info.value)
    assert policy.metadata.scripted and "SCRIPTED STAND-IN" in policy.metadata.description


def test_needs_simulator_ground_truth(library: SkillLibrary, food_world: World) -> None:
    policy = stand_in(library)
    policy.reset("open the pink cover", 0)
    observation = observe(food_world, 1, 0)
    blind = type(observation)(observation.observation_id, observation.stamp_s, observation.robot)
    with pytest.raises(MissingObservation, match=r"ground truth|object poses"):
        policy.infer(blind)


def test_food_serving_subtasks_succeed_and_the_same_seed_repeats(library: SkillLibrary, food_world: World) -> None:
    episode = tasks(library, "open the pink cover", "put the carrot in the bowl")
    first = run_episode(food_world, stand_in(library, **NO_FAILURES), episode, seed=3, steps_per_inference=8)
    assert first.success and first.completed == 2 and not first.collided
    again = run_episode(food_world, stand_in(library, **NO_FAILURES), episode, seed=3, steps_per_inference=8)
    assert again.steps == first.steps


def test_a_drawn_drop_loses_the_object(library: SkillLibrary) -> None:
    world = World(without_obstacles(load_scene(scenes_dir() / "safety.yaml")), seed=0)
    episode = tasks(library, "put the cube in the bowl")
    assert run_episode(world, stand_in(library, **NO_FAILURES), episode, seed=0, steps_per_inference=8).success
    dropping = stand_in(library, drop_probability=1.0, slip_probability=0.0, stuck_probability=0.0)
    result = run_episode(world, dropping, episode, seed=0, steps_per_inference=8)
    assert not result.success
    assert dropping.phase == "done"  # it carried on as if it still held the cube


def test_it_ignores_obstacles_and_the_safe_variant_climbs_over_them(library: SkillLibrary) -> None:
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    episode = tasks(library, "open the pink cover", "put the carrot in the bowl")
    plain = run_episode(world, stand_in(library, **NO_FAILURES), episode, seed=1, steps_per_inference=8)
    assert any(v.touched == "bottle" for v in plain.violations)  # the bottle stands on its straight path
    careful = stand_in(library, avoid_fraction=1.0, **NO_FAILURES)
    safe = run_episode(world, careful, episode, seed=1, steps_per_inference=8)
    assert not any(v.touched == "bottle" for v in safe.violations)
    assert safe.success


def test_resuming_with_the_object_in_hand_skips_the_grasp(library: SkillLibrary, food_world: World) -> None:
    policy = stand_in(library, **NO_FAILURES)
    result = run_episode(food_world, policy, tasks(library, "open the pink cover"), seed=2, steps_per_inference=8)
    assert result.success
    policy.reset("put the carrot in the bowl", 5)
    carrot = food_world.object_position("carrot")
    # Pretend a recovery left the carrot held 5 cm above the table under the tool.
    observation = observe(food_world, 1, 0)
    lifted = dict(observation.objects)
    lifted["carrot"] = type(lifted["carrot"])(carrot + np.array([0.0, 0.0, 0.05]), lifted["carrot"].quaternion)
    robot = type(observation.robot)(
        carrot + np.array([0.0, 0.0, 0.064]), observation.robot.ee_rotation, observation.robot.joint_positions, 0.03
    )
    policy.infer(type(observation)(1, observation.stamp_s, robot, objects=lifted, scene=observation.scene))
    assert policy.phase == "lift"


def test_every_scripted_skill_names_objects_of_some_scene(library: SkillLibrary) -> None:
    objects = set()
    for path in scenes_dir().glob("*.yaml"):
        objects |= {o.name for o in load_scene(path).spec.objects}
    for skill in library.vla:
        assert skill.script is not None
        assert skill.script.object in objects, skill.instruction
        assert not skill.script.destination or skill.script.destination in objects, skill.instruction


def test_backends_are_chosen_by_name() -> None:
    policy = BACKENDS.get("sim_scripted_safe").make(PolicyConfig(backend="sim_scripted_safe"), None)
    assert policy.metadata.backend == "sim_scripted_safe" and "safety-finetuned" in policy.metadata.description
    with pytest.raises(KeyError, match="did you mean 'sim_scripted'"):
        BACKENDS.get("sim_scriptd")
    assert np.isfinite(PolicyConfig().scripted_speed_m_s)
