"""The user's answer to a question about an object (core/answers.py): read from their
words, written to their memory as a fact about the object, and trusted by the next plan
without a question. It settles what nothing knows; it never clears what the curated
knowledge says an object holds, and it is no constraint of the user's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from carryon_bench.core.personalization_score import plan_request  # planned as planner_node plans an Ask
from carryon_common.core.openai_client import OpenAiClient
from carryon_common.core.skills import SkillLibrary, VlaSkill
from carryon_planner.core.answers import answers_in
from carryon_planner.core.facts import load_preference_rules
from carryon_planner.core.knowledge import Confirmation, load_food_knowledge
from carryon_planner.core.plan import UpdateUser
from carryon_sim.harness.fakes.openai_server import StubVlmServer

CONFIG = Path(__file__).resolve().parents[2] / "config"
RULES = load_preference_rules(CONFIG / "planner" / "preferences.yaml")
KNOWLEDGE = load_food_knowledge(CONFIG / "planner" / "food_knowledge.yaml")
OBJECTS = ["zorbly_stew", "rice", "bowl", "cheddar", "hummus", "table"]
LIBRARY = SkillLibrary(
    vla=[
        VlaSkill(instruction="put the zorbly stew in the bowl", objects=["zorbly_stew", "bowl"]),
        VlaSkill(instruction="put the hummus in the bowl", objects=["hummus", "bowl"]),
        VlaSkill(instruction="put the rice in the bowl", objects=["rice", "bowl"]),
    ]
)
SCENE = {"shelf": ["zorbly_stew", "hummus", "rice", "bowl"]}


def said(obj: str, kind: str, holds: bool) -> Confirmation:
    return Confirmation(obj, kind, holds, "ines")


@pytest.mark.parametrize(
    "request_text,expected",
    [
        ("The zorbly stew has no sesame, bring it please", [said("zorbly_stew", "sesame", False)]),
        ("Yes - the zorbly stew is sesame-free.", [said("zorbly_stew", "sesame", False)]),
        ("The zorbly stew doesn't have sesame in it", [said("zorbly_stew", "sesame", False)]),
        ("There is no mustard in the zorbly stew, go ahead", [said("zorbly_stew", "mustard", False)]),
        ("Bring me the zorbly stew, it has no sesame.", [said("zorbly_stew", "sesame", False)]),
        ("The zorbly stew contains peanuts.", [said("zorbly_stew", "peanuts", True)]),
        (
            "The zorbly stew has mustard and no egg",
            [said("zorbly_stew", "mustard", True), said("zorbly_stew", "egg", False)],
        ),
    ],
)
def test_what_the_user_says_an_object_has_or_lacks_is_read(request_text: str, expected: list[Confirmation]) -> None:
    assert sorted(answers_in(request_text, OBJECTS, KNOWLEDGE, "ines"), key=str) == sorted(expected, key=str)


@pytest.mark.parametrize(
    "request_text",
    [
        "Does the zorbly stew have sesame?",
        "I think the zorbly stew has no sesame",  # a hedge is no answer
        "Bring me the zorbly stew without sesame",  # a wish, not a statement about the stew
        "I'm allergic to sesame, bring me the rice",
        "Bring the zorbly stew if it has no sesame",
        "The cheddar has no milk",  # the curated knowledge says it always holds milk
    ],
)
def test_questions_hedges_wishes_and_contradictions_of_the_knowledge_are_not_answers(request_text: str) -> None:
    assert answers_in(request_text, OBJECTS, KNOWLEDGE, "ines") == ()


def _plan(*subtasks: dict[str, Any], reply: str = "I will put the zorbly stew in the bowl.") -> str:
    return json.dumps({"reply": reply, "subtasks": list(subtasks), "memory_operations": []})


STEW = {"id": "s1", "kind": "vla", "objective": "stew served", "instruction": "put the zorbly stew in the bowl",
        "target": "zorbly_stew"}  # fmt: skip


def _ask(users: dict[str, Any], request: str, *replies: str) -> Any:
    with StubVlmServer(list(replies) * 3) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        return plan_request(
            llm, request=request, user="ines", users=users, scene=SCENE, library=LIBRARY,
            preference_rules=RULES, max_repairs=0, knowledge=KNOWLEDGE,
        )  # fmt: skip


def test_the_answer_is_remembered_and_the_next_plan_needs_no_question() -> None:
    allergic = {"ines": {"allergy": {"food": "sesame"}}}
    first = _ask(allergic, "Bring me the zorbly stew", _plan(STEW))
    assert not first.plan.physical and first.questions == ("zorbly_stew",)

    answered = _ask(allergic, "The zorbly stew has no sesame, bring it please", _plan(STEW))
    assert [s.instruction for s in answered.plan.physical if s.kind == "vla"] == ["put the zorbly stew in the bowl"]
    (write,) = [op for op in answered.plan.memory_operations if isinstance(op, UpdateUser)]
    assert (write.entity, write.key, write.value, write.durable) == (
        "zorbly_stew",
        "contains_sesame",
        "no sesame",
        True,
    )

    remembered = {"ines": {"allergy": {"food": "sesame"}, write.entity: {write.key: write.value}}}
    later = _ask(remembered, "Bring me the zorbly stew", _plan(STEW))
    assert [s.instruction for s in later.plan.physical if s.kind == "vla"] == ["put the zorbly stew in the bowl"]
    assert later.questions == ()


def test_an_answer_about_an_object_is_no_constraint_of_the_users() -> None:
    """ "the stew has no sesame" stored for a user without an allergy rules nothing out:
    the hummus (sesame) is still served to them."""
    users = {"ines": {"zorbly_stew": {"contains_sesame": "no sesame"}}}
    hummus = {"id": "s1", "kind": "vla", "objective": "hummus served", "instruction": "put the hummus in the bowl",
              "target": "hummus"}  # fmt: skip
    outcome = _ask(users, "Bring me the hummus", _plan(hummus, reply="I will put the hummus in the bowl."))
    assert [s.instruction for s in outcome.plan.physical if s.kind == "vla"] == ["put the hummus in the bowl"]


def test_a_user_saying_an_object_has_no_allergen_the_knowledge_says_it_has_is_not_served() -> None:
    allergic = {"ines": {"allergy": {"food": "sesame"}}}
    hummus = {"id": "s1", "kind": "vla", "objective": "hummus served", "instruction": "put the hummus in the bowl",
              "target": "hummus"}  # fmt: skip
    outcome = _ask(
        allergic, "The hummus has no sesame, bring it", _plan(hummus, reply="I will put the hummus in the bowl.")
    )
    assert not [s for s in outcome.plan.physical if s.kind == "vla"]
    assert not [op for op in outcome.plan.memory_operations if isinstance(op, UpdateUser)]


def test_an_answer_that_lists_kinds_or_names_a_diet_settles_each_kind() -> None:
    """The answer to "whether the stew has egg, honey or milk": "it has no egg, honey or
    milk" settles all three; "the stew is vegan" settles what veganism rules out; "not
    vegan" says nothing of which kind it holds."""
    objects = ["zorbly_stew", "bowl"]
    listed = answers_in("The zorbly stew has no egg, honey or milk, bring it.", objects, KNOWLEDGE, "ines")
    assert {(c.kind, c.holds) for c in listed} == {("egg", False), ("honey", False), ("milk", False)}
    vegan = {(c.kind, c.holds) for c in answers_in("the zorbly stew is vegan", objects, KNOWLEDGE, "ines")}
    assert {("egg", False), ("milk", False), ("meat", False), ("honey", False)} <= vegan
    assert answers_in("the zorbly stew is not vegan", objects, KNOWLEDGE, "ines") == ()
    # a diet word never clears what the knowledge says an object holds
    assert ("milk", False) not in {
        (c.kind, c.holds) for c in answers_in("the cheddar is vegan", OBJECTS, KNOWLEDGE, "ines")
    }
