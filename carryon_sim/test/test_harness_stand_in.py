"""The scripted stand-in VLA on the simulated world (in-process, no ROS), and its scripts
file checked against the skill library."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from carryon_common.core.errors import ConfigError
from carryon_common.core.skills import SkillLibrary, VlaSkill, load_skill_library, skills_path
from carryon_policy.core.backends import BACKENDS, BackendRegistry, installed_entry_points, make_policy
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.policy import MissingObservation, UnknownInstruction
from carryon_sim.core.scene import load_scene, scenes_dir
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import Task, observe, run_episode, without_obstacles
from carryon_sim.harness.stand_in import (
    Script,
    ScriptedParams,
    ScriptedPolicy,
    load_stand_in_scripts,
    scene_geometry,
    sim_scripted,
    sim_scripted_safe,
    stand_in_scripts_path,
)

NO_FAILURES = {"drop_probability": 0.0, "slip_probability": 0.0, "stuck_probability": 0.0}


@pytest.fixture(scope="module")
def library() -> SkillLibrary:
    return load_skill_library(skills_path())


@pytest.fixture(scope="module")
def scripts(library: SkillLibrary) -> dict[str, Script]:
    return load_stand_in_scripts(stand_in_scripts_path(), library)


@pytest.fixture(scope="module")
def food_world() -> World:
    return World(without_obstacles(load_scene(scenes_dir() / "food_serving.yaml")), seed=0)


def stand_in(scripts: dict[str, Script], **params: float) -> ScriptedPolicy:
    return ScriptedPolicy(scripts, scene_geometry(scenes_dir()), ScriptedParams(**params))  # type: ignore[arg-type]


def tasks(scripts: dict[str, Script], *instructions: str) -> list[Task]:
    return [Task(instruction, scripts[instruction], 400) for instruction in instructions]


def test_unknown_instruction_is_refused_with_the_known_skills(scripts: dict[str, Script]) -> None:
    policy = stand_in(scripts)
    with pytest.raises(UnknownInstruction) as info:
        policy.reset("make me a sandwich", 0)
    assert "'open the pink cover'" in str(info.value) and "'put the carrot in the bowl'" in str(info.value)
    assert policy.metadata.scripted and "SCRIPTED STAND-IN" in policy.metadata.description


def test_needs_simulator_ground_truth(scripts: dict[str, Script], food_world: World) -> None:
    policy = stand_in(scripts)
    policy.reset("open the pink cover", 0)
    observation = observe(food_world, 1, 0)
    blind = type(observation)(observation.observation_id, observation.stamp_s, observation.robot)
    with pytest.raises(MissingObservation, match=r"ground truth|object poses"):
        policy.infer(blind)


def test_food_serving_subtasks_succeed_and_the_same_seed_repeats(scripts: dict[str, Script], food_world: World) -> None:
    episode = tasks(scripts, "open the pink cover", "put the carrot in the bowl")
    first = run_episode(food_world, stand_in(scripts, **NO_FAILURES), episode, seed=3, steps_per_inference=8)
    assert first.success and first.completed == 2 and not first.collided
    again = run_episode(food_world, stand_in(scripts, **NO_FAILURES), episode, seed=3, steps_per_inference=8)
    assert again.steps == first.steps


def test_a_drawn_drop_loses_the_object(scripts: dict[str, Script]) -> None:
    world = World(without_obstacles(load_scene(scenes_dir() / "safety.yaml")), seed=0)
    episode = tasks(scripts, "put the cube in the bowl")
    assert run_episode(world, stand_in(scripts, **NO_FAILURES), episode, seed=0, steps_per_inference=8).success
    dropping = stand_in(scripts, drop_probability=1.0, slip_probability=0.0, stuck_probability=0.0)
    result = run_episode(world, dropping, episode, seed=0, steps_per_inference=8)
    assert not result.success
    assert dropping.phase == "done"  # it carried on as if it still held the cube


def test_it_ignores_obstacles_and_the_safe_variant_climbs_over_them(scripts: dict[str, Script]) -> None:
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    episode = tasks(scripts, "open the pink cover", "put the carrot in the bowl")
    plain = run_episode(world, stand_in(scripts, **NO_FAILURES), episode, seed=1, steps_per_inference=8)
    assert any(v.touched == "bottle" for v in plain.violations)  # the bottle stands on its straight path
    careful = stand_in(scripts, avoid_fraction=1.0, **NO_FAILURES)
    safe = run_episode(world, careful, episode, seed=1, steps_per_inference=8)
    assert not any(v.touched == "bottle" for v in safe.violations)
    assert safe.success


def test_resuming_with_the_object_in_hand_skips_the_grasp(scripts: dict[str, Script], food_world: World) -> None:
    policy = stand_in(scripts, **NO_FAILURES)
    result = run_episode(food_world, policy, tasks(scripts, "open the pink cover"), seed=2, steps_per_inference=8)
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


def test_every_script_names_objects_of_some_scene(scripts: dict[str, Script]) -> None:
    objects = set()
    for path in scenes_dir().glob("*.yaml"):
        objects |= {o.name for o in load_scene(path).spec.objects}
    for instruction, script in scripts.items():
        assert script.object in objects, instruction
        assert not script.destination or script.destination in objects, instruction


def test_scripts_are_checked_against_the_library(library: SkillLibrary, tmp_path: Path) -> None:
    with_new = SkillLibrary(vla=[*library.vla, VlaSkill(instruction="wave at the user")])
    scripts = load_stand_in_scripts(stand_in_scripts_path(), with_new)
    assert "wave at the user" not in scripts and list(scripts) == list(library.instructions)
    stale = tmp_path / "scripts.yaml"
    stale.write_text(
        stand_in_scripts_path().read_text()
        + "  put the carot in the bowl: {motion: push, object: cube, offset: [0.1, 0]}\n"
    )
    with pytest.raises(ConfigError, match=r"does not have.*did you mean 'put the carrot in the bowl'"):
        load_stand_in_scripts(stale, library)


def test_backends_are_chosen_by_name() -> None:
    policy = BACKENDS.get("sim_scripted_safe").make(PolicyConfig(backend="sim_scripted_safe"), None)
    assert policy.metadata.backend == "sim_scripted_safe" and "safety-finetuned" in policy.metadata.description
    with pytest.raises(KeyError, match="did you mean 'sim_scripted'"):
        BACKENDS.get("sim_scriptd")
    assert np.isfinite(PolicyConfig().scripted_speed_m_s)


def test_the_stand_ins_are_found_through_the_installed_entry_point() -> None:
    """The registry knows them only from carryon_sim's package metadata (setup.py's entry
    points, as colcon installed them), never by a module name of its own."""
    found = {ep.name: ep for ep in installed_entry_points()}
    assert found["sim_scripted"].value == "carryon_sim.harness.stand_in:sim_scripted"
    assert found["sim_scripted_safe"].value == "carryon_sim.harness.stand_in:sim_scripted_safe"
    dist = found["sim_scripted"].dist
    assert dist is not None and dist.name.replace("-", "_") == "carryon_sim"  # setuptools writes carryon-sim
    fresh = BackendRegistry((), discover=installed_entry_points)
    for name, safe in (("sim_scripted", False), ("sim_scripted_safe", True)):
        backend = fresh.get(name)
        assert backend.make is (sim_scripted_safe if safe else sim_scripted)
        assert backend.description.startswith("SIMULATION HARNESS: scripted stand-in")
        policy = make_policy(PolicyConfig(backend=name))
        assert (policy.metadata.backend, policy.metadata.scripted) == (name, True)
        assert isinstance(policy, ScriptedPolicy) and (policy.params.avoid_fraction is not None) == safe


def test_an_instruction_without_a_script_is_refused_when_asked(tmp_path: Path) -> None:
    library = tmp_path / "library.yaml"
    library.write_text(
        skills_path().read_text() + "  - instruction: wave at the user\n    description: waves\n    objects: []\n"
    )
    policy = BACKENDS.get("sim_scripted").make(PolicyConfig(skills_file=str(library)), None)
    policy.reset("put the carrot in the bowl", seed=0)  # the others still play
    with pytest.raises(UnknownInstruction, match="wave at the user"):
        policy.reset("wave at the user", seed=0)
    assert "wave at the user" not in policy.metadata.instructions


def test_the_scripts_file_is_a_parameter(tmp_path: Path) -> None:
    scripts = tmp_path / "scripts.yaml"
    scripts.write_text("scripts:\n  push the cube forward: {motion: push, object: cube, offset: [0.1, 0]}\n")
    policy = BACKENDS.get("sim_scripted").make(PolicyConfig(stand_in_scripts_file=str(scripts)), None)
    assert policy.metadata.instructions == ("push the cube forward",)
