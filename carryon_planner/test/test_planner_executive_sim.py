"""The executive in simulation (in-process MuJoCo, the scripted stand-in, the SIMULATOR ORACLE
judge): dependency order, conditions, failure -> recovery -> resume, replanning on a
revealed item, and refusal on a preference conflict (planner + executive, stub LLM over HTTP)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from carryon_bench.core.personalization_score import plan_request  # planned as planner_node plans an Ask
from carryon_common.core.openai_client import OpenAiClient
from carryon_common.core.skills import load_skill_library, skills_path
from carryon_judge.core.backends import rule_params, shapes_for
from carryon_judge.core.config import JudgeConfig
from carryon_planner.core.assist import assist
from carryon_planner.core.executive import Executive, State
from carryon_planner.core.facts import load_preference_rules
from carryon_planner.core.plan import Plan, UpdateScene, parse_plan
from carryon_planner.core.repair import PlanningOutcome
from carryon_policy.core.backends import BACKENDS
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.policy import Observation, Policy, PolicyMetadata, PolicyOutput
from carryon_sim.core.predicates import inside_of
from carryon_sim.core.scene import load_scene, scenes_dir
from carryon_sim.core.world import ARM_JOINTS, World
from carryon_sim.harness.dispatch import SimDispatch, SimPlant, visible_items
from carryon_sim.harness.episodes import without_obstacles
from carryon_sim.harness.fakes.openai_server import StubVlmServer
from carryon_sim.harness.oracle import SimOracleJudge

CONFIG = Path(__file__).resolve().parents[2] / "config"
COUNTER = ("meat in plate", "pink_cover", "plate")  # what a look at the counter shows at the start
MEMORY = {"kitchen_counter": ("pink_cover", "carrot under pink_cover", "meat in plate", "plate"),
          "dining_table": ("bowl",)}  # fmt: skip


def scripted(drop: float = 0.0) -> Policy:
    config = PolicyConfig(scripted_drop_probability=drop, scripted_slip_probability=0.0,
                          scripted_stuck_probability=0.0)  # fmt: skip
    return BACKENDS.get("sim_scripted").make(config, None)


def dispatch_for(policy: Policy, seed: int = 0, stuck_timeout_s: float = 20.0, budget: int = 500) -> SimDispatch:
    world = World(without_obstacles(load_scene(scenes_dir() / "food_serving.yaml")), seed=seed)
    world.reset(seed)
    config = JudgeConfig(stuck_timeout_s=stuck_timeout_s)
    plant = SimPlant(world, policy, SimOracleJudge(shapes_for(config), rule_params(config)), shapes_for(config),
                     seed=seed)  # fmt: skip
    return SimDispatch(plant, budget_steps=budget)


def plan_of(subtasks: list[dict[str, Any]], reply: str = "I will serve the carrot.") -> Plan:
    return parse_plan(json.dumps({"reply": reply, "subtasks": subtasks}))


OBSERVE = {"id": "s1", "kind": "observe", "objective": "see the counter", "target": "kitchen_counter"}
OPEN = {"id": "s2", "kind": "vla", "objective": "the carrot is uncovered", "instruction": "open the pink cover",
        "target": "pink_cover", "source": "kitchen_counter", "depends_on": ["s1"]}  # fmt: skip
LOOK_AGAIN = {"id": "s3", "kind": "observe", "objective": "see what the cover hid", "target": "kitchen_counter",
              "depends_on": ["s2"]}  # fmt: skip
CARROT = {"id": "s4", "kind": "vla", "objective": "the carrot is in the bowl",
          "instruction": "put the carrot in the bowl", "target": "carrot", "source": "kitchen_counter",
          "destination": "bowl", "depends_on": ["s3"], "condition": "carrot present"}  # fmt: skip
UNDER_COVER = {"id": "s5", "kind": "say", "objective": "tell the user there was food under the cover",
               "depends_on": ["s3"], "condition": "meat under pink_cover"}  # fmt: skip


def test_a_plan_runs_in_dependency_order_with_conditions() -> None:
    dispatch = dispatch_for(scripted())
    order: list[str] = []

    def note(records: Any) -> None:
        active = [r.subtask.id for r in records if r.state == State.ACTIVE]
        if active and (not order or order[-1] != active[0]):
            order.append(active[0])

    result = Executive(plan_of([OBSERVE, OPEN, LOOK_AGAIN, CARROT, UNDER_COVER]), dispatch, MEMORY, note).run()
    assert result.succeeded, result.message
    assert order == ["s1", "s2", "s3", "s4"]  # s5's condition is false: skipped, never active
    states = {r.subtask.id: r.state for r in result.records}
    assert states == {"s1": State.SUCCEEDED, "s2": State.SUCCEEDED, "s3": State.SUCCEEDED, "s4": State.SUCCEEDED,
                      "s5": State.SKIPPED}  # fmt: skip
    first, second = dispatch.observed
    assert first == ("kitchen_counter", COUNTER)  # the carrot is hidden at first...
    assert "carrot" in second[1]  # ...and seen once the cover is off
    assert inside_of(dispatch.plant.world, "carrot") == "bowl"  # ground truth


def test_a_condition_that_does_not_hold_skips_the_step_and_its_dependents() -> None:
    dispatch = dispatch_for(scripted())
    covered = {**CARROT, "id": "s2", "depends_on": ["s1"], "condition": "carrot present"}
    after = {**UNDER_COVER, "id": "s3", "kind": "say", "depends_on": ["s2"], "condition": ""}
    result = Executive(plan_of([OBSERVE, covered, after]), dispatch, MEMORY).run()
    states = {r.subtask.id: r.state for r in result.records}
    assert states == {"s1": State.SUCCEEDED, "s2": State.SKIPPED, "s3": State.SKIPPED}
    assert dispatch.plant.log == []  # the policy never ran


class DropsOnce:
    """The stand-in that drops the carrot on its first carry, then behaves."""

    def __init__(self) -> None:
        self.dropping, self.rest, self.carries = scripted(drop=1.0), scripted(), 0
        self.current = self.rest

    @property
    def metadata(self) -> PolicyMetadata:
        return self.rest.metadata

    def reset(self, instruction: str, seed: int) -> None:
        self.carries += instruction == "put the carrot in the bowl"
        self.current = self.dropping if self.carries == 1 and "carrot" in instruction else self.rest
        self.current.reset(instruction, seed)

    def infer(self, observation: Observation) -> PolicyOutput:
        return self.current.infer(observation)


def test_a_failed_verdict_suspends_recovers_and_resumes_the_instruction() -> None:
    policy = DropsOnce()
    # A drop shows as no progress: a short stuck timeout makes the judge call it within the budget.
    # (Seed 4: the stand-in re-grasps where the carrot fell; on seed 0 it fails to, and only
    # a recovery skill that re-grasps would help: issue 9.)
    dispatch = dispatch_for(policy, seed=4, stuck_timeout_s=8.0, budget=800)  # type: ignore[arg-type]
    # Uncover first (its own policy run), then the carry that drops.
    result = Executive(plan_of([OBSERVE, OPEN, LOOK_AGAIN, CARROT]), dispatch, MEMORY).run()
    assert result.succeeded, (result.message, dispatch.plant.log)
    log = dispatch.plant.log
    carry = [line for line in log if line.startswith("s4")]
    assert len([line for line in carry if "policy started" in line]) == 2, log  # started, then resumed
    assert len([line for line in carry if "recovery" in line]) == 1, log
    resumed = [line for line in carry if "policy started" in line][1]
    assert int(resumed.split(", ")[1].split()[0]) < 800  # resumed with the remaining budget
    assert inside_of(dispatch.plant.world, "carrot") == "bowl"


def test_a_revealed_item_stops_the_plan_for_a_replan() -> None:
    dispatch = dispatch_for(scripted())
    memory = {"kitchen_counter": ("pink_cover", "carrot under pink_cover", "plate"), "dining_table": ("bowl",)}
    result = Executive(plan_of([OBSERVE, OPEN, LOOK_AGAIN, CARROT]), dispatch, memory).run()
    assert not result.succeeded and result.replan == {"kitchen_counter": COUNTER}  # the meat was not remembered
    states = {r.subtask.id: r.state for r in result.records}
    assert states["s1"] == State.SUCCEEDED and states["s2"] == State.CANCELLED and states["s4"] == State.CANCELLED
    assert dispatch.plant.log == []  # nothing moved


def test_revealed_meat_is_recorded_and_refused_for_a_vegetarian() -> None:
    """Serve me food (alice, vegetarian): look -> meat revealed -> replan with a mandatory
    update_scene; the LLM offers the meat, the validator rejects it and the planner drops it
    without another LLM round (core/mend.py): the carrot is served, the reply says why."""
    library = load_skill_library(skills_path(str(CONFIG / "skills" / "library.yaml")))
    rules = load_preference_rules(CONFIG / "planner" / "preferences.yaml")
    users = {"alice": {"diet": {"preference": "vegetarian"}}}
    scene: dict[str, tuple[str, ...]] = {"kitchen_counter": ("pink_cover", "carrot under pink_cover", "plate"),
                                         "dining_table": ("bowl",)}  # fmt: skip
    record = {"op": "update_scene", "action": "set_contents", "location": "kitchen_counter", "contents": list(COUNTER),
              "before_subtask": "s2"}  # fmt: skip
    meat = {**CARROT, "id": "s5", "instruction": "put the meat in the bowl", "target": "meat", "condition": ""}
    replies = [
        json.dumps({"reply": "I will look at the kitchen_counter first.", "subtasks": [OBSERVE]}),
        json.dumps(
            {
                "reply": "I will uncover the pink cover and serve the meat and the carrot.",
                "subtasks": [OBSERVE, OPEN, LOOK_AGAIN, CARROT, meat],
                "memory_operations": [record],
            }
        ),
    ]
    dispatch = dispatch_for(scripted())
    with StubVlmServer(replies) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)

        def plan(observations: Mapping[str, tuple[str, ...]]) -> PlanningOutcome:
            return plan_request(llm, request="Serve me food", user="alice", users=users, scene=scene,
                                   library=library, preference_rules=rules, max_repairs=2,
                                   observations=observations)  # fmt: skip

        def apply(chosen: Plan) -> dict[str, tuple[str, ...]]:
            for op in chosen.memory_operations:
                if isinstance(op, UpdateScene) and op.action == "set_contents":
                    scene[op.location] = tuple(op.contents)
            return dict(scene)

        finished: list[Any] = []
        result = assist(plan, apply, dispatch, on_finished=finished.append)
        assert finished == [result]
        second_prompt = "\n".join(stub.requests[1].texts())
    assert result.succeeded, result.message
    first, second = result.rounds
    assert first.run is not None and first.run.replan == {"kitchen_counter": COUNTER}
    assert "Observed since the last plan" in second_prompt and "meat in plate" in second_prompt
    (attempt,) = second.outcome.attempts
    assert attempt.rejected_because == ""
    assert attempt.mended == ("[preference_conflict] dropped s5: meat conflicts with 'diet preference: vegetarian'",)
    assert len(stub.requests) == 2 and "Left out because of your preferences: meat" in result.reply
    assert "vegetarian" in result.reply
    assert scene["kitchen_counter"] == COUNTER  # recorded into scene memory
    assert inside_of(dispatch.plant.world, "carrot") == "bowl"
    assert inside_of(dispatch.plant.world, "meat") == "plate"  # never served


def test_visible_items_hide_covered_objects() -> None:
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    world.reset(0)
    assert visible_items(world, "kitchen_counter") == COUNTER
    assert visible_items(world, "dining_table") == ("bowl",)


def test_observe_from_perception_sees_what_the_oracle_sees() -> None:
    """What the planner's observe reports from perception (the real tabletop pipeline on the
    simulator's rendered colour + depth, the planner's own locations file) is what the
    harness's oracle (`visible_items`, from the simulator's state) says a look shows: with the
    carrot under its cover and with the cover lifted."""
    from carryon_common.core.clouds import CameraView
    from carryon_common.core.locations import load_locations
    from carryon_perception.core.build import build_tabletop
    from carryon_planner.core import observe
    from carryon_sim.core.cameras import CameraRig
    from carryon_sim.core.world import SCENE_CAMERA, WRIST_CAMERA

    regions = load_locations(CONFIG / "planner" / "locations.yaml")
    world = World(load_scene(scenes_dir() / "food_serving.yaml"), seed=0)
    world.reset(0)
    names = [o.name for o in world.scene.spec.objects]
    rig = CameraRig(world.model, world.object_of_body, 256, 256)
    try:
        for uncovered in (False, True):
            if uncovered:
                world.uncover("pink_cover")
            perception = build_tabletop(CONFIG, "food_serving", names)
            views = []
            for name, mujoco_name in (("scene", SCENE_CAMERA), ("wrist", WRIST_CAMERA)):
                f = rig.render(world.data, mujoco_name)
                views.append(CameraView(name, world.time, f.rgb, f.depth, None, {}, f.K, f.world_from_camera))
            joints = dict(zip(ARM_JOINTS, (float(q) for q in world.arm_q()), strict=True))
            result = perception.perceive(views, joints, world.gripper_width(), world.time)
            assert result.out_of_view == ()  # both locations are in the scene camera's view
            seen = [
                observe.Seen(o.label, float(o.centroid[0]), float(o.centroid[1]), o.support, held=not o.support)
                for o in result.objects
            ]
            assert set(regions) == set(world.scene.spec.locations)
            for location in regions:
                perceived = observe.visible_items(seen, location, regions)
                assert perceived == visible_items(world, location), (uncovered, location, result.objects)
    finally:
        rig.close()
