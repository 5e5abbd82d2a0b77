"""Deterministic repairs (core/mend.py): what the validator can mend by itself is mended
without an LLM round, the result is validated again, and what cannot be mended is left
for the LLM with the mended plan in front of it."""

from __future__ import annotations

import json
from typing import Any

from planner_fixtures import ScriptedLlm

from carryon_common.core.llm import ChatMessage
from carryon_common.core.skills import SkillLibrary, VlaSkill
from carryon_planner.core.executive import with_hidden
from carryon_planner.core.facts import planning_facts
from carryon_planner.core.mend import mend
from carryon_planner.core.plan import Plan, UpdateScene
from carryon_planner.core.repair import plan_with_repair
from carryon_planner.core.taxonomy import Taxonomy
from carryon_planner.core.validator import PlanningFacts, Validator

RULES = Taxonomy(kinds={"meat": ("ham", "meat")}, diets={"vegetarian": ("meat",)}, rules_out={})
SCENE = {"kitchen_counter": ["pink_cover", "carrot under pink_cover", "meat in plate"], "dining_table": ["bowl"]}
LIBRARY = SkillLibrary(
    vla=[
        VlaSkill(instruction="open the pink cover", objects=("pink_cover",)),
        VlaSkill(instruction="put the carrot in the bowl", objects=("carrot", "bowl")),
        VlaSkill(instruction="put the meat in the bowl", objects=("meat", "bowl")),
    ]
)


def facts(scene: dict[str, list[str]] = SCENE, **extra: Any) -> PlanningFacts:
    return planning_facts(
        request="Serve me food", scene=scene, library=LIBRARY, user_facts=("vegetarian",), preference_rules=RULES,
        **extra,
    )  # fmt: skip


def step(sid: str, instruction: str, target: str, *after: str, condition: str = "") -> dict[str, Any]:
    return {"id": sid, "kind": "vla", "objective": f"{target} done", "instruction": instruction, "target": target,
            "depends_on": list(after), "condition": condition}  # fmt: skip


LOOK = {"id": "s1", "kind": "observe", "objective": "see the counter", "target": "kitchen_counter"}
OPEN = step("s2", "open the pink cover", "pink_cover", "s1")
CARROT = step("s3", "put the carrot in the bowl", "carrot", "s2")
MEAT = step("s4", "put the meat in the bowl", "meat", "s2")


def plan(*subtasks: dict[str, Any], reply: str = "I will serve the carrot and the meat.", **more: Any) -> Plan:
    return Plan.model_validate({"reply": reply, "subtasks": list(subtasks), **more})


def test_a_preference_conflict_drops_the_subtask_and_what_handles_the_same_object_and_the_reply_says_why() -> None:
    after_meat = step("s5", "put the carrot in the bowl", "carrot", "s4")  # waited for the meat, does not need it
    with_meat = step("s6", "open the pink cover", "pink_cover", "s4", condition="meat in bowl")
    mended = mend(plan(LOOK, OPEN, MEAT, after_meat, with_meat), facts())
    assert mended is not None and [s.id for s in mended.plan.subtasks] == ["s1", "s2", "s5"]
    assert mended.plan.subtasks[2].depends_on == ["s2"]  # what the dropped meat step waited for
    assert mended.fixes == ("[preference_conflict] dropped s4, s6: meat conflicts with 'vegetarian'",)
    assert mended.plan.reply == (
        "I will open the pink cover, then put the carrot in the bowl. "
        "Left out because of your preferences: meat (vegetarian)."
    )
    assert Validator().validate(mended.plan, facts()).ok


def test_a_chain_keeps_its_order_around_a_dropped_link() -> None:
    carrot = step("s5", "put the carrot in the bowl", "carrot", "s4")
    mended = mend(plan(LOOK, OPEN, MEAT | {"depends_on": ["s1", "s2"]}, carrot), facts())
    assert mended is not None and [s.id for s in mended.plan.subtasks] == ["s1", "s2", "s5"]
    assert mended.plan.subtasks[2].depends_on == ["s1", "s2"]


def test_a_control_step_naming_a_vla_skill_becomes_a_vla_step() -> None:
    as_control = CARROT | {"kind": "control"}
    reply = "I will open the pink cover and put the carrot in the bowl."
    mended = mend(plan(LOOK, OPEN, as_control, reply=reply), facts())
    assert mended is not None and mended.plan.subtasks[2].kind == "vla"
    assert mended.fixes == ("[instruction_in_library] s3 is the VLA skill 'put the carrot in the bowl'",)
    assert Validator().validate(mended.plan, facts()).ok
    unknown = CARROT | {"kind": "control", "instruction": "wave", "depends_on": ["s1"]}
    assert mend(plan(LOOK, unknown, reply="I will wave at the carrot."), facts()) is None  # the LLM's to mend


def test_a_statement_moves_nothing_and_keeps_its_memory_write() -> None:
    stated = planning_facts(request="I drink tea every morning", scene=SCENE, library=LIBRARY)
    tea = {"op": "update_user", "entity": "drink", "key": "morning", "value": "tea", "durable": True}
    seen = {"op": "update_scene", "action": "set_contents", "location": "dining_table", "contents": ["bowl"]}
    mended = mend(plan(LOOK, OPEN, CARROT, reply="I will bring you tea.", memory_operations=[tea, seen]), stated)
    assert mended is not None and [s.id for s in mended.plan.subtasks] == ["s1"]  # looking moves nothing
    assert mended.fixes == (
        "[action_requested] dropped s2, s3: the request asks or states something, it orders nothing",
    )
    assert mended.plan.reply == "Noted (morning: tea). Nothing was moved: you did not ask me to move anything."
    assert len(mended.plan.memory_operations) == 2 and Validator().validate(mended.plan, stated).ok
    # A reply that promises nothing is the model's answer, kept as it is.
    question = planning_facts(request="Where is the carrot?", scene=SCENE, library=LIBRARY)
    answered = mend(plan(OPEN | {"depends_on": []}, reply="The carrot is under the pink cover."), question)
    assert answered is not None and answered.plan.subtasks == [] and answered.plan.reply.startswith("The carrot is")
    assert Validator().validate(answered.plan, question).ok
    # An order is not a statement: nothing is dropped for it.
    assert mend(plan(LOOK, OPEN, CARROT, reply="I will open the pink cover, then serve the carrot."), facts()) is None


def test_a_statement_acknowledged_as_a_promise_is_said_anew_from_what_it_remembers() -> None:
    """Seen with the local model: "From now on I drink juice instead of coffee. Please
    remember that." answered "Noted: I will drink juice instead of coffee." with the right
    update_user and no steps; "I will" read as a promise, and the repair round lost the write."""
    stated = planning_facts(
        request="From now on I drink juice instead of coffee. Please remember that.", scene=SCENE, library=LIBRARY
    )
    juice = {"op": "update_user", "entity": "drink", "key": "preference", "value": "juice", "durable": True}
    said = plan(reply="Noted: I will drink juice instead of coffee.", memory_operations=[juice])
    assert [v.check for v in Validator().validate(said, stated).violations] == ["reply_matches_subtasks"]
    mended = mend(said, stated)
    assert mended is not None and mended.plan.reply == "Noted (preference: juice)."
    assert mended.plan.memory_operations == said.memory_operations and Validator().validate(mended.plan, stated).ok
    once = mend(plan(reply="I'll have water today.", memory_operations=[juice | {"durable": False}]), stated)
    assert once is not None and once.plan.reply == "Noted (preference: juice, this time only)."
    # Nothing remembered: a question's answer is the model's, even when it reads as a promise.
    question = planning_facts(request="What is my usual drink?", scene=SCENE, library=LIBRARY)
    assert mend(plan(reply="I will tell you: coffee."), question) is None
    # An order's promise with no steps is the LLM's to mend (it left out what it promised).
    assert mend(plan(reply="I will bring the carrot.", memory_operations=[juice]), facts()) is None


def test_a_plan_with_nothing_left_becomes_a_refusal_that_says_why() -> None:
    look_first = {**LOOK}
    mended = mend(plan(look_first, step("s2", "put the meat in the bowl", "meat", "s1")), facts())
    assert mended is not None and mended.plan.subtasks == [] and mended.plan.refusal
    assert mended.plan.reply.startswith("Sorry, I did not do that") and "meat (vegetarian)" in mended.plan.reply
    assert Validator().validate(mended.plan, facts()).ok
    # A plan that also writes memory ("I'm vegetarian now, give me the meat") keeps its write:
    # a reply only, not a refusal (a refused plan writes nothing).
    vegetarian = {"op": "update_user", "entity": "diet", "key": "preference", "value": "vegetarian", "durable": True}
    kept = mend(plan(look_first, step("s2", "put the meat in the bowl", "meat", "s1"), memory_operations=[vegetarian]),
                facts())  # fmt: skip
    assert kept is not None and kept.plan.subtasks == [] and kept.plan.refusal is None
    assert len(kept.plan.memory_operations) == 1 and Validator().validate(kept.plan, facts()).ok


def test_what_the_request_asks_for_by_name_and_memory_rules_out_is_not_swapped_for_something_else() -> None:
    """ "Bring me the meat" to a vegetarian: nothing moves (the carrot in its place is not
    what was asked for); the reply says why. What the request itself declines ("no meat")
    or does not name is not such a request."""
    asked = planning_facts(request="Bring me the meat, please", scene=SCENE, library=LIBRARY,
                           user_facts=("vegetarian",), preference_rules=RULES)  # fmt: skip
    carrot_only = plan(LOOK, OPEN, CARROT, reply="I will open the pink cover, then put the carrot in the bowl.")
    violations = Validator().validate(carrot_only, asked).violations
    assert "preference_conflict" in [v.check for v in violations] and "asks for meat" in violations[0].message
    mended = mend(carrot_only, asked)
    assert mended is not None and mended.plan.subtasks == [] and mended.plan.refusal
    assert "meat (vegetarian" in mended.plan.reply and Validator().validate(mended.plan, asked).ok
    for request in ("Serve me food, no meat", "Serve me the carrot"):
        declined = planning_facts(request=request, scene=SCENE, library=LIBRARY, user_facts=("vegetarian",),
                                  preference_rules=RULES)  # fmt: skip
        assert Validator().validate(carrot_only, declined).ok, request


def test_what_else_the_request_names_is_still_served_when_one_named_thing_is_ruled_out() -> None:
    """ "The meat and the carrot" to a vegetarian: the meat is left out and said why, the
    carrot (and the cover over it) is still served; only what would stand in for the meat
    is not."""
    both = planning_facts(request="Bring me the meat and the carrot, please", scene=SCENE, library=LIBRARY,
                          user_facts=("vegetarian",), preference_rules=RULES)  # fmt: skip
    after_meat = step("s4", "put the carrot in the bowl", "carrot", "s3")
    meat_first = plan(LOOK, OPEN, MEAT | {"id": "s3"}, after_meat, reply="I will open the pink cover, then serve.")
    assert {v.check for v in Validator().validate(meat_first, both).violations} >= {"preference_conflict"}
    mended = mend(meat_first, both)
    assert mended is not None and [s.id for s in mended.plan.subtasks] == ["s1", "s2", "s4"]
    assert "meat (vegetarian" in mended.plan.reply and Validator().validate(mended.plan, both).ok
    carrot_only = plan(LOOK, OPEN, CARROT, reply="I will open the pink cover, then put the carrot in the bowl.")
    assert Validator().validate(carrot_only, both).ok


def test_an_unrecorded_observation_is_written_to_scene_memory_before_the_first_physical_step() -> None:
    seen = with_hidden({"kitchen_counter": ("meat in plate", "pink_cover")}, SCENE)  # the carrot: under it still
    reply = "I will open the pink cover and put the carrot in the bowl."
    mended = mend(plan(OPEN | {"depends_on": []}, CARROT, reply=reply), facts(pending_observations=seen))
    assert mended is not None
    (op,) = mended.plan.memory_operations
    assert isinstance(op, UpdateScene) and op.action == "set_contents" and op.location == "kitchen_counter"
    assert op.contents == ["meat in plate", "pink_cover", "carrot under pink_cover"] and op.before_subtask == "s2"
    assert Validator().validate(mended.plan, facts(pending_observations=seen)).ok


def test_what_a_seen_cover_hides_stays_remembered_under_it() -> None:
    """A camera cannot see under a cover: an observation that saw the pink cover (and not
    the carrot) keeps scene memory's "carrot under pink_cover"; what it saw moved or gone
    is taken from the observation."""
    covered = {"kitchen_counter": ["pink_cover", "carrot under pink_cover", "plate"], "dining_table": ["bowl"]}
    seen = with_hidden({"kitchen_counter": ("meat in plate", "pink_cover", "plate")}, covered)
    assert seen == {"kitchen_counter": ("meat in plate", "pink_cover", "plate", "carrot under pink_cover")}
    mended = mend(
        plan(OPEN | {"depends_on": []}, reply="I will open the pink cover."), facts(covered, pending_observations=seen)
    )
    assert mended is not None
    (op,) = mended.plan.memory_operations
    assert isinstance(op, UpdateScene) and "carrot under pink_cover" in op.contents
    # The cover gone, or the carrot seen elsewhere: nothing hidden is carried over.
    assert with_hidden({"kitchen_counter": ("plate",)}, covered) == {"kitchen_counter": ("plate",)}
    moved = {"kitchen_counter": ("pink_cover",), "dining_table": ("bowl", "carrot")}
    assert with_hidden(moved, covered) == moved


def test_a_condition_gets_an_observe_step_of_where_its_objects_are() -> None:
    conditional = step("s1", "open the pink cover", "pink_cover", condition="carrot under pink_cover")
    mended = mend(plan(conditional, reply="I will open the pink cover."), facts())
    assert mended is not None and [s.id for s in mended.plan.subtasks] == ["look1", "s1"]
    look = mended.plan.subtasks[0]
    assert look.kind == "observe" and look.target == "kitchen_counter"  # scene memory: the cover is there
    assert mended.plan.subtasks[1].depends_on == ["look1"]
    assert Validator().validate(mended.plan, facts()).ok


def test_a_condition_waits_for_the_plans_only_observe_step_when_its_place_is_unknown() -> None:
    scene = {**SCENE, "dining_table": ["bowl", "pink_cover"]}  # the cover at two places: no single location
    two_places = planning_facts(request="Serve me food", scene=scene, library=LIBRARY)
    conditional = step("s2", "open the pink cover", "pink_cover", condition="pink_cover present")
    mended = mend(plan(LOOK, conditional, reply="I will open the pink cover."), two_places)
    assert mended is not None and mended.plan.subtasks[1].depends_on == ["s1"]
    assert mended.fixes == ("[conditions_observable] s2 now waits for observe step s1",)
    assert Validator().validate(mended.plan, two_places).ok
    # With no observe step and no single place, nothing is guessed: the LLM's to mend.
    assert mend(plan(conditional | {"id": "s1"}, reply="I will open the pink cover."), two_places) is None


def test_nothing_is_mended_in_a_plan_whose_subtasks_are_not_a_graph() -> None:
    duplicate = CARROT | {"id": "s2"}
    assert mend(plan(LOOK, OPEN, duplicate, MEAT), facts()) is None
    assert mend(plan(LOOK | {"depends_on": ["s2"]}, OPEN, MEAT), facts()) is None  # a cycle
    assert mend(plan(LOOK, OPEN, MEAT | {"depends_on": ["s9"]}), facts()) is None
    assert mend(plan(LOOK, OPEN, CARROT, reply="I will open the pink cover and serve the carrot."), facts()) is None


def test_what_is_left_after_mending_goes_to_the_llm_with_the_mended_plan() -> None:
    paraphrased = step("s3", "place the carrot into the bowl", "carrot", "s2")
    first = json.dumps({"reply": "Serving the carrot and the meat.", "subtasks": [LOOK, OPEN, paraphrased, MEAT]})
    second = json.dumps({"reply": "I will open the pink cover and serve the carrot.", "subtasks": [LOOK, OPEN, CARROT]})
    llm = ScriptedLlm([first, second])
    outcome = plan_with_repair(
        llm, [ChatMessage("user", "Serve me food")], facts(), max_repairs=2, validator=Validator()
    )
    assert not outcome.refused and len(outcome.attempts) == 2
    assert outcome.attempts[0].mended[0].startswith("[preference_conflict] dropped s4")
    assert outcome.attempts[0].reply == first  # the LLM's own words are kept in the record
    assert outcome.attempts[0].rejected_because.startswith("[instruction_in_library]")
    shown, feedback = llm.seen[1][-2], llm.seen[1][-1]
    assert shown.role == "assistant" and '"s4"' not in shown.content and "place the carrot" in shown.content
    assert "instruction_in_library" in feedback.content and "preference_conflict" not in feedback.content


def test_acting_on_a_remembered_object_waits_for_an_observe_of_where_it_is() -> None:
    carrot = step("s1", "put the carrot in the bowl", "carrot")
    uncovered = facts({"kitchen_counter": ["pink_cover", "carrot", "meat in plate"], "dining_table": ["bowl"]})
    report = Validator().validate(plan(carrot, reply="I will put the carrot in the bowl."), uncovered)
    assert [v.check for v in report.violations] == ["observe_before_act"]
    mended = mend(plan(carrot, reply="I will put the carrot in the bowl."), uncovered)
    assert mended is not None and [s.id for s in mended.plan.subtasks] == ["look1", "s1"]
    assert mended.plan.subtasks[0].target == "kitchen_counter" and mended.plan.subtasks[1].depends_on == ["look1"]
    assert mended.fixes == ("[observe_before_act] added observe step look1 of kitchen_counter before s1",)
    assert Validator().validate(mended.plan, uncovered).ok
    # The plan's own observe of that place, not yet before it: waited for, nothing added.
    later_look = LOOK | {"id": "s2"}
    mended = mend(plan(carrot, later_look, reply="I will put the carrot in the bowl."), uncovered)
    assert mended is not None and mended.plan.subtasks[0].depends_on == ["s2"]
    assert mended.fixes == ("[observe_before_act] s1 now waits for observe step s2 of kitchen_counter",)
    # Seen since the last plan (a replan): no new look.
    seen = facts(pending_observations={"kitchen_counter": ("carrot", "pink_cover")})
    seen_report = Validator().validate(plan(carrot, reply="I will put the carrot in the bowl."), seen)
    assert "observe_before_act" not in {v.check for v in seen_report.violations}


def test_a_reply_that_does_not_name_what_is_done_is_said_anew() -> None:
    vague = plan(LOOK, OPEN, CARROT, reply="I will get your food ready.")
    mended = mend(vague, facts())
    assert mended is not None and mended.fixes == ("[reply_matches_subtasks] the reply is said anew from the subtasks",)
    assert (
        mended.plan.reply
        == "I will look at the kitchen counter, then open the pink cover, then put the carrot in the bowl."
    )
    assert Validator().validate(mended.plan, facts()).ok


def test_a_step_that_only_served_the_ruled_out_object_goes_with_it() -> None:
    uncover_meat = OPEN | {"condition": "meat under pink_cover"}  # before the meat step, only for it
    mended = mend(plan(LOOK, uncover_meat, MEAT, reply="I will open the pink cover and serve the meat."), facts())
    assert mended is not None and [s.id for s in mended.plan.subtasks] == [] and mended.plan.refusal
    assert mended.fixes == ("[preference_conflict] dropped s2, s4: meat conflicts with 'vegetarian'",)


def test_a_dropped_step_with_the_container_as_target_does_not_take_the_container_along() -> None:
    meat_into_bowl = MEAT | {"target": "bowl", "depends_on": ["s2"]}  # a small model's habit: target = container
    carrot = step("s5", "put the carrot in the bowl", "carrot", "s4")
    mended = mend(plan(LOOK, OPEN, meat_into_bowl, carrot, reply="I will serve the carrot and the meat."), facts())
    assert mended is not None and [s.id for s in mended.plan.subtasks] == ["s1", "s2", "s5"]
    assert mended.fixes[0].startswith("[preference_conflict] dropped s4: put the meat in the bowl conflicts with")


def test_what_scene_memory_has_nowhere_and_the_request_does_not_name_is_not_acted_on() -> None:
    """Memory holds only meat under the cover, and something at every place: "Serve me food"
    answered with the library's carrot is not carried out (nothing says there is one, and
    nowhere is left to look); a request that names the carrot, or whose user remembers it
    (a favourite snack), is carried out; a place memory holds nothing at is searched first
    (search_before_act)."""
    only_meat = {"kitchen_counter": ["pink_cover", "meat under pink_cover"], "dining_table": ["bowl"]}
    serve = planning_facts(request="Serve me food", scene=only_meat, library=LIBRARY)
    carrot = plan(
        LOOK,
        CARROT | {"depends_on": ["s1"]},
        reply="I will look at the kitchen counter, then put the carrot in the bowl.",
    )
    assert "act_on_what_is_there" in {v.check for v in Validator().validate(carrot, serve).violations}
    mended = mend(carrot, serve)
    assert mended is not None and mended.plan.subtasks == [] and "no carrot" in mended.plan.reply
    assert mended.fixes == ("[act_on_what_is_there] dropped s3: no carrot anywhere",)
    asked = planning_facts(request="Put the carrot in the bowl", scene=only_meat, library=LIBRARY)
    assert "act_on_what_is_there" not in {v.check for v in Validator().validate(carrot, asked).violations}
    favourite = planning_facts(
        request="Bring me my favourite snack", scene=only_meat, library=LIBRARY, user_facts=["carrot"]
    )
    assert "act_on_what_is_there" not in {v.check for v in Validator().validate(carrot, favourite).violations}
    empty = planning_facts(request="Serve me food", scene={**only_meat, "side_table": []}, library=LIBRARY)
    assert "search_before_act" in {v.check for v in Validator().validate(carrot, empty).violations}
