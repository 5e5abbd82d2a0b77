"""Plan parsing and every validator check, one failing case each plus a passing plan."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from carryon_planner.core.plan import Plan, PlanParseError, condition_names, parse_plan, plan_json_schema
from carryon_planner.core.requests import request_asks_for_action
from carryon_planner.core.validator import PlanningFacts, Validator

FACTS = PlanningFacts(
    request="Serve me food",
    instructions=("open the pink cover", "put the carrot in the bowl", "put the meat in the bowl"),
    objects=frozenset({"pink_cover", "carrot", "plate", "bowl", "meat"}),
    locations=frozenset({"kitchen_counter", "dining_table"}),
    user_facts=frozenset({"vegetarian", "whole-wheat"}),
    foreign_facts=frozenset({"ham", "vegetarian"}),
    # Scene memory places the food on the counter and the bowl on the table (an object it
    # places nowhere would be looked for at every location first: search_before_act).
    whereabouts={"pink_cover": "kitchen_counter", "carrot": "kitchen_counter", "bowl": "dining_table"},
)

GOOD: dict[str, Any] = {
    "reply": "I'll check the kitchen counter and, if the carrot is under the pink cover, put the carrot in the bowl.",
    "subtasks": [
        {"id": "s1", "kind": "observe", "objective": "see what is on the counter", "target": "kitchen_counter"},
        {"id": "s2", "kind": "vla", "objective": "the cover is off the carrot", "instruction": "open the pink cover",
         "target": "pink_cover", "depends_on": ["s1"], "condition": "carrot under pink_cover"},
        {"id": "s3", "kind": "vla", "objective": "carrot in the bowl", "instruction": "put the carrot in the bowl",
         "target": "carrot", "destination": "bowl", "depends_on": ["s2"], "condition": "carrot under pink_cover"},
    ],
}  # fmt: skip


def plan_with(**changes: Any) -> str:
    raw = json.loads(json.dumps(GOOD))
    raw.update(changes)
    return json.dumps(raw)


def checks(text: str, facts: PlanningFacts = FACTS) -> set[str]:
    return {v.check for v in Validator().validate(parse_plan(text), facts).violations}


def test_a_good_plan_passes_and_the_schema_exports() -> None:
    assert checks(json.dumps(GOOD)) == set()
    schema = plan_json_schema()
    assert set(schema["required"]) >= {"reply"} and "subtasks" in schema["properties"]


def test_the_decoding_schema_narrows_instructions_and_names() -> None:
    schema = plan_json_schema(["put the carrot in the bowl"], ["carrot", "bowl"])
    subtask = schema["$defs"]["PlannedSubtask"]["properties"]
    assert subtask["instruction"]["enum"] == ["", "put the carrot in the bowl"]
    assert subtask["target"]["enum"] == subtask["destination"]["enum"] == ["", "bowl", "carrot"]
    assert "enum" not in plan_json_schema()["$defs"]["PlannedSubtask"]["properties"]["instruction"]  # not mutated
    update = plan_json_schema(["put the carrot in the bowl"], ["carrot", "bowl"])["$defs"]["UpdateScene"]
    assert update["properties"]["location"]["enum"] == ["bowl", "carrot"] and "location" in update["required"]
    only_places = plan_json_schema(["put the carrot in the bowl"], ["carrot", "bowl", "counter"], locations=["counter"])
    assert only_places["$defs"]["UpdateScene"]["properties"]["location"]["enum"] == ["counter"]


def test_the_decoding_schema_allows_only_conditions_the_validator_reads_over_known_names() -> None:
    names = ["carrot", "pink_cover", "kitchen_counter", "Big Bowl"]
    subtask = plan_json_schema(["put the carrot in the bowl"], names)["$defs"]["PlannedSubtask"]["properties"]
    pattern = re.compile(subtask["condition"]["pattern"])
    for good in ("", "carrot under pink_cover", "pink_cover at kitchen_counter", "carrot absent"):
        assert pattern.fullmatch(good) and (good == "" or condition_names(good) is not None)
    for bad in (
        "empty bag",
        "carrot under cover",
        "tea under pink_cover",
        "carrot is under pink_cover",
        "Big Bowl present",
    ):
        assert not pattern.fullmatch(bad)
    assert "control" in subtask["kind"]["enum"]  # control skills not said: all kinds
    no_control = plan_json_schema(["put the carrot in the bowl"], names, control_skills=())
    assert no_control["$defs"]["PlannedSubtask"]["properties"]["kind"]["enum"] == ["vla", "observe", "say"]
    assert "pattern" not in plan_json_schema()["$defs"]["PlannedSubtask"]["properties"]["condition"]


def test_a_question_or_statement_is_decoded_with_nothing_that_moves_and_its_memory_first() -> None:
    schema = plan_json_schema(["put the carrot in the bowl"], ["carrot"], control_skills=(), moves=False)
    assert schema["$defs"]["PlannedSubtask"]["properties"]["kind"]["enum"] == ["observe", "say"]
    assert list(schema["properties"])[:2] == ["reply", "memory_operations"]
    assert schema["required"] == ["reply", "memory_operations"]
    assert plan_json_schema()["required"] == ["reply", "subtasks"]  # an order: the subtasks are not optional
    assert Plan.model_json_schema()["required"] == ["reply"]  # the shared schema is not changed


def test_the_id_and_name_patterns_carry_their_length_limits() -> None:
    """llama.cpp's grammar converter reads a pattern and ignores maxLength: the bounds must be in the pattern."""
    defs = plan_json_schema()["$defs"]
    id_pattern = re.compile(defs["PlannedSubtask"]["properties"]["id"]["pattern"])
    assert id_pattern.fullmatch("s" * 16) and not id_pattern.fullmatch("s" * 17) and not id_pattern.fullmatch("")
    name_pattern = re.compile(defs["UpdateScene"]["properties"]["item"]["pattern"])
    assert name_pattern.fullmatch("x" * 64) and not name_pattern.fullmatch("x" * 65)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not json", "invalid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"subtasks": []}', "reply: Field required"),
        (plan_with(extra_field=1), "extra_field: Extra inputs are not permitted"),
        (plan_with(subtasks=[{"id": "s1", "kind": "dance", "objective": "x"}]), "subtasks.0.kind"),
        (plan_with(subtasks=[{"id": "../x", "kind": "say", "objective": "x"}]), "subtasks.0.id"),
    ],
)
def test_malformed_replies_are_parse_errors(text: str, problem: str) -> None:
    with pytest.raises(PlanParseError, match=problem.replace(".", r"\.")):
        parse_plan(text)


def test_a_fenced_reply_is_accepted() -> None:
    assert parse_plan("```json\n" + json.dumps(GOOD) + "\n```").reply.startswith("I'll")


def sub(**fields: Any) -> dict[str, Any]:
    return {"id": "s1", "kind": "vla", "objective": "x", **fields}


@pytest.mark.parametrize(
    ("changes", "check"),
    [
        ({"subtasks": [sub(instruction="put carrot into bowl", target="carrot")]}, "instruction_in_library"),
        ({"subtasks": [sub(kind="control", instruction="dance")]}, "instruction_in_library"),
        ({"subtasks": [sub(instruction="put the carrot in the bowl", target="banana")]}, "known_names"),
        ({"subtasks": [sub(kind="observe", target="garage")]}, "known_names"),
        ({"subtasks": [sub(instruction="put the carrot in the bowl", target="carrot", destination="moon")]},
         "known_names"),
        ({"subtasks": [sub(instruction="put the carrot in the bowl", target="carrot", depends_on=["s9"])]},
         "dependencies_exist"),
        ({"subtasks": [sub(id="s1", kind="say", depends_on=["s2"]), sub(id="s2", kind="say", depends_on=["s1"])]},
         "no_dependency_cycle"),
        ({"subtasks": [sub(kind="say"), sub(kind="say")]}, "unique_ids"),
        ({"refusal": "no", "subtasks": [sub(kind="say")]}, "refusal_without_subtasks"),
        ({"subtasks": [sub(instruction="put the carrot in the bowl", target="carrot", condition="it looks nice")]},
         "conditions_observable"),
        ({"subtasks": [sub(instruction="put the carrot in the bowl", target="carrot",
                           condition="carrot under pink_cover")]}, "conditions_observable"),  # no observe first
        ({"reply": "Here you go.", "subtasks": [sub(instruction="put the carrot in the bowl", target="carrot")]},
         "reply_matches_subtasks"),
        ({"reply": "I'll bring it right away.", "subtasks": []}, "reply_matches_subtasks"),
        ({"reply": "A ham sandwich for you, with the carrot.",
          "subtasks": [sub(instruction="put the carrot in the bowl", target="carrot")]}, "no_foreign_facts"),
    ],
)  # fmt: skip
def test_each_check_rejects_its_case(changes: dict[str, Any], check: str) -> None:
    assert check in checks(plan_with(**changes))


def test_no_physical_action_for_questions_or_statements() -> None:
    for request in ("Where is my mug?", "I'm vegetarian now", "remember that I like tea"):
        assert not request_asks_for_action(request)
        facts = PlanningFacts(**{**FACTS.__dict__, "request": request})
        assert "action_requested" in checks(json.dumps(GOOD), facts)
    assert request_asks_for_action("Can you put the carrot in the bowl?") is True  # "can" asks for an action
    assert request_asks_for_action("Serve me food")
    assert request_asks_for_action("I'm going swimming, pack my bag")  # an order after a statement
    assert request_asks_for_action("The keys are on the sofa now. Put them in the box.")
    assert not request_asks_for_action("My keys are not in the hallway any more, they are on the sofa now.")
    assert not request_asks_for_action("I've switched to tea for good, please remember that. No drink now, thanks.")


@pytest.mark.parametrize(
    "request_text",
    [
        "I'd love the hummus and some crudites for lunch.",  # a wish for something now
        "I'll have the soup, thanks",
        "The gluten-free soba for lunch, thanks.",  # a noun phrase with no verb
        "My lunch, the way I always have it.",
        "The soup of the day for me.",
        "I'm switching to oat milk for good - make me a bowl now.",  # a dash ends a clause
    ],
)
def test_wishes_for_now_and_verbless_noun_phrases_are_orders(request_text: str) -> None:
    assert request_asks_for_action(request_text)


@pytest.mark.parametrize(
    "request_text",
    [
        "The keys are on the sofa now.",
        "The stew contains nuts.",  # an inflected verb: a statement
        "The milk spilled earlier.",
        "I'd like to know where my mug is",
        "My favourite drink is tea",
        "I like tea",
        "Keep that on file: I'm allergic to sesame as well.",  # what to do with it is to remember it
        "Going forward, make my porridge with oat milk. Nothing needed right now.",
    ],
)
def test_statements_that_open_like_a_noun_phrase_are_not_orders(request_text: str) -> None:
    assert not request_asks_for_action(request_text)


def test_the_known_names_are_taken_out_before_looking_for_a_verb() -> None:
    assert not request_asks_for_action("The lupini beans for me")  # "beans" reads as a verb
    assert request_asks_for_action("The lupini beans for me", ["lupini_beans"])


def test_a_fact_the_user_said_themselves_is_not_foreign() -> None:
    facts = PlanningFacts(**{**FACTS.__dict__, "request": "I'd like ham today", "user_facts": frozenset()})
    text = plan_with(reply="Ham it is, with the carrot.",
                     subtasks=[sub(instruction="put the carrot in the bowl", target="carrot")])  # fmt: skip
    assert "no_foreign_facts" not in checks(text, facts)


def test_revealed_contents_must_be_written_to_scene_memory() -> None:
    facts = PlanningFacts(**{**FACTS.__dict__, "pending_observations": {"kitchen_counter": ("meat", "plate")}})
    assert "observation_updates_scene" in checks(json.dumps(GOOD), facts)
    update = {"op": "update_scene", "action": "set_contents", "location": "kitchen_counter",
              "contents": ["meat", "plate"], "before_subtask": "s2"}  # fmt: skip
    assert "observation_updates_scene" not in checks(plan_with(memory_operations=[update]), facts)


def test_serving_what_the_users_preference_rules_out_is_rejected() -> None:
    from carryon_planner.core.facts import load_preference_rules
    from carryon_planner.core.taxonomy import ruled_out

    rules = load_preference_rules(Path(__file__).resolve().parents[2] / "config" / "planner" / "preferences.yaml")
    facts = PlanningFacts(**{**FACTS.__dict__, "ruled_out": ruled_out(FACTS.objects, ["vegetarian"], rules)})
    meat = plan_with(reply="I'll put the meat in the bowl.",
                     subtasks=[sub(instruction="put the meat in the bowl", target="meat")])  # fmt: skip
    violations = Validator().validate(parse_plan(meat), facts).violations
    assert [v.check for v in violations] == ["preference_conflict"]
    assert "'vegetarian'" in violations[0].message
    assert checks(json.dumps(GOOD), facts) == set()  # the carrot is fine


def test_nothing_about_another_user_is_written_into_this_users_memory() -> None:
    facts = PlanningFacts(**{**FACTS.__dict__, "request": "remember what I like", "other_users": frozenset({"bob"})})

    def write(entity: str, key: str, value: str) -> str:
        op = {"op": "update_user", "entity": entity, "key": key, "value": value, "durable": True}
        return json.dumps({"reply": "Noted.", "memory_operations": [op]})

    assert "no_other_users" in checks(write("bob", "diet", "meat"), facts)  # a section `bob` in this user's file
    assert "no_other_users" in checks(write("bob_diet", "preference", "meat"), facts)
    assert "no_other_users" in checks(write("friends", "diet", "bob eats meat"), facts)
    assert "no_other_users" not in checks(write("bobcat", "toy", "plush"), facts)  # a word, not the user
    assert "no_other_users" not in checks(write("diet", "preference", "pescatarian"), facts)


def test_another_users_value_is_never_written_and_in_prose_only_when_the_scene_does_not_use_it() -> None:
    facts = PlanningFacts(**{
        **FACTS.__dict__, "request": "remember my bread", "user_facts": frozenset(),
        "objects": FACTS.objects | {"white_bowl"}, "foreign_facts": frozenset({"white", "no restrictions"}),
    })  # fmt: skip

    def plan(reply: str, value: str = "rye") -> str:
        op = {"op": "update_user", "entity": "bread", "key": "preference", "value": value, "durable": True}
        return json.dumps({"reply": reply, "memory_operations": [op]})

    assert "no_foreign_facts" in checks(plan("Noted.", value="white"), facts)  # bob's value stored for this user
    assert "no_foreign_facts" in checks(plan("Noted: no restrictions for you."), facts)
    assert "no_foreign_facts" not in checks(plan("Noted: rye, served in the white bowl."), facts)
