"""Step plans (core/steps.py): the compact answer asked of the small local model, its
schema, its expansion into a full plan, and the repair loop speaking it; and the facts a
request names, pointed out next to it (context.relevant_facts)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from carryon_common.core.llm import ChatMessage
from carryon_common.core.skills import SkillLibrary, VlaSkill
from carryon_planner.core.config import PlannerConfig
from carryon_planner.core.context import build_messages, relevant_facts
from carryon_planner.core.facts import planning_facts
from carryon_planner.core.memory_ops import StoredFact
from carryon_planner.core.plan import PlanParseError
from carryon_planner.core.repair import plan_with_repair
from carryon_planner.core.steps import as_steps, expand, named_in, parse_steps, steps_json_schema
from carryon_planner.core.taxonomy import Taxonomy
from carryon_planner.core.validator import Validator

RULES = Taxonomy(kinds={"meat": ("ham",)}, diets={"vegetarian": ("meat",)}, rules_out={})
SCENE = {"counter": ["bread", "ham", "cheese", "peanut_butter", "plate", "pink_cover", "carrot under pink_cover"]}
LIBRARY = SkillLibrary(
    vla=[
        VlaSkill(instruction="put the bread on the plate"),
        VlaSkill(instruction="put the ham on the bread"),
        VlaSkill(instruction="put the cheese on the bread"),
        VlaSkill(instruction="put the peanut butter on the bread"),
        VlaSkill(instruction="lift the pink cover"),
    ]
)
NAMES = ["bread", "butter", "cheese", "counter", "ham", "peanut_butter", "pink_cover", "plate", "carrot"]


@dataclass
class StepLlm:
    """Answers step plans in order; records the conversations and schemas it was sent."""

    replies: list[dict[str, Any] | str]
    seen: list[list[ChatMessage]] = field(default_factory=list)
    schemas: list[dict[str, Any]] = field(default_factory=list)
    name: str = "steps"

    def complete(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> str:
        assert schema is not None
        self.seen.append(list(messages))
        self.schemas.append(schema)
        reply = self.replies.pop(0)
        return reply if isinstance(reply, str) else json.dumps(reply)


def facts(request: str = "Make me a sandwich", users: Sequence[str] = ()) -> Any:
    return planning_facts(
        request=request, scene=SCENE, library=LIBRARY, user_facts=users, preference_rules=RULES
    )  # fmt: skip


def test_an_instruction_names_its_objects_in_order_the_longest_name_first() -> None:
    assert named_in("put the peanut butter on the bread", NAMES) == ["peanut_butter", "bread"]
    assert named_in("lift the pink cover", NAMES) == ["pink_cover"]
    assert named_in("put the cheese on the bread", NAMES) == ["cheese", "bread"]
    assert named_in("wave hello", NAMES) == []
    assert named_in("put the breadcrumbs away", NAMES) == []  # whole words only


def test_steps_expand_into_a_chain_of_subtasks_with_what_the_model_did_not_write() -> None:
    steps = parse_steps(
        json.dumps(
            {
                "reply": "I will look at the counter, lift the cover if the carrot is under it, then make it.",
                "steps": [
                    {"do": "observe counter"},
                    {"do": "lift the pink cover", "when": "carrot under pink_cover"},
                    {"do": "put the peanut butter on the bread"},
                    {"do": "control open_gripper"},
                ],
            }
        )
    )
    plan = expand(steps, NAMES, {"peanut_butter": "counter", "pink_cover": "counter"})
    look, lift, spread, control = plan.subtasks
    assert [s.id for s in plan.subtasks] == ["s1", "s2", "s3", "s4"]
    assert (look.kind, look.target, look.depends_on) == ("observe", "counter", [])
    assert (lift.kind, lift.target, lift.source, lift.destination) == ("vla", "pink_cover", "counter", "")
    assert lift.condition == "carrot under pink_cover" and lift.depends_on == ["s1"]
    assert (spread.target, spread.source, spread.destination, spread.depends_on) == (
        "peanut_butter",
        "counter",
        "bread",
        ["s2"],
    )
    assert (control.kind, control.instruction) == ("control", "open_gripper")
    assert as_steps(plan) == steps  # shown back to the model in its own form
    # The objects the library declares for an instruction (what it moves, then where to) come first.
    pack = parse_steps(json.dumps({"reply": "I will pack your snack.", "steps": [{"do": "put the snack in the bag"}]}))
    assert expand(pack, NAMES, {}).subtasks[0].target == ""  # neither is a known name
    (packed,) = expand(pack, NAMES, {"snack": "shelf"}, {"put the snack in the bag": ("snack", "bag")}).subtasks
    assert (packed.target, packed.source, packed.destination) == ("snack", "shelf", "bag")


def test_a_step_plan_that_is_not_one_says_why() -> None:
    with pytest.raises(PlanParseError, match=r"steps\.0\.do"):
        parse_steps(json.dumps({"reply": "ok", "steps": [{"when": ""}]}))
    with pytest.raises(PlanParseError, match="invalid JSON"):
        parse_steps('{"reply": "ok", "steps": [')


def test_the_step_schema_allows_only_the_library_the_places_and_the_known_conditions() -> None:
    schema = steps_json_schema(LIBRARY.instructions, NAMES, control_skills=("open_gripper",), locations=["counter"])
    step = schema["$defs"]["Step"]["properties"]
    assert step["do"]["enum"] == [*sorted(LIBRARY.instructions), "observe counter", "control open_gripper"]
    assert "carrot" in step["when"]["pattern"] and "under" in step["when"]["pattern"]
    assert schema["$defs"]["UpdateScene"]["properties"]["location"]["enum"] == ["counter"]
    assert next(iter(schema["properties"])) == "reply"
    # An order: the steps are required, right after the reply (a grammar may skip an optional property).
    assert schema["required"] == ["reply", "steps"] and list(schema["properties"])[:2] == ["reply", "steps"]
    # A question or a statement: only looks, and memory is decided first.
    still = steps_json_schema(LIBRARY.instructions, NAMES, moves=False, locations=["counter"])
    assert still["$defs"]["Step"]["properties"]["do"]["enum"] == ["observe counter"]
    assert list(still["properties"])[:2] == ["reply", "memory_operations"]
    assert still["required"] == ["reply", "memory_operations"]


def test_the_repair_loop_speaks_steps_and_mends_the_expanded_plan() -> None:
    ham = {
        "reply": "I will make your sandwich with ham and cheese.",
        "steps": [
            {"do": "observe counter"},
            {"do": "put the bread on the plate"},
            {"do": "put the ham on the bread"},
            {"do": "put the cheese on the bread"},
        ],
    }
    llm = StepLlm([ham])
    outcome = plan_with_repair(
        llm, [ChatMessage("user", "Make me a sandwich")], facts(users=["vegetarian"]), max_repairs=1,
        validator=Validator(), steps=True,
    )  # fmt: skip
    assert not outcome.refused, outcome.attempts
    assert llm.schemas[0]["title"] == "StepPlan"
    instructions = [s.instruction for s in outcome.plan.subtasks if s.kind == "vla"]
    assert instructions == ["put the bread on the plate", "put the cheese on the bread"]  # ham dropped: vegetarian
    assert any("preference_conflict" in fix for fix in outcome.attempts[0].mended)
    # What the validator cannot mend goes back to the model, in steps, with the ids explained.
    unknown = {"reply": "I will spread jam.", "steps": [{"do": "spread the jam"}]}
    good = {"reply": "I will put the bread on the plate.", "steps": [{"do": "put the bread on the plate"}]}
    llm = StepLlm([unknown, good])
    outcome = plan_with_repair(
        llm, [ChatMessage("user", "Put the bread on the plate")], facts("Put the bread on the plate"),
        max_repairs=1, validator=Validator(), steps=True,
    )  # fmt: skip
    assert not outcome.refused and len(outcome.attempts) == 2
    feedback = llm.seen[1][-1].content
    assert isinstance(feedback, str) and "not copied verbatim" in feedback and "Subtask sN is your step N" in feedback


def test_the_facts_a_request_names_are_pointed_out_with_their_objects() -> None:
    stored = [
        StoredFact("sandwich", "filling", "cheese and tomato"),
        StoredFact("habits", "swimming", "always packs swimsuit and towel"),
        StoredFact("diet", "preference", "vegetarian"),
        StoredFact("mug", "reference_image", "images/mug.png"),
    ]
    objects = ["cheese", "tomato", "swimsuit", "towel", "laptop"]
    found = relevant_facts("Make me a sandwich, please", stored, objects)
    assert [(r.fact.key, r.objects) for r in found] == [("filling", ("cheese", "tomato"))]
    found = relevant_facts("I'm going swimming: pack my bag", stored, objects)
    line = "- habits.swimming: always packs swimsuit and towel (objects: swimsuit, towel)"
    assert [r.line() for r in found] == [line]
    # Named by none of their entities or keys: the facts whose values name objects (an image is not one).
    unnamed = relevant_facts("Could you fix me lunch?", stored, objects)
    assert [(r.fact.key, r.named) for r in unnamed] == [("filling", False), ("swimming", False)]
    assert relevant_facts("Bring me my mug", stored, ["mug"]) == []
    lunch = build_messages(
        request="Could you fix me lunch?", user_id="alice", memory="", endpoints=(), library=(), steps=True,
        relevant=unnamed,
    )[1].content  # fmt: skip
    assert isinstance(lunch, str) and "act on exactly the one that fits the request" in lunch
    messages = build_messages(
        request="Make me a sandwich", user_id="alice", memory="", endpoints=(), library=(), steps=True,
        relevant=relevant_facts("Make me a sandwich", stored, objects),
    )  # fmt: skip
    user = messages[1].content
    assert isinstance(user, str)
    assert user.index("## What the user's memory says about this request") < user.index("## Request")
    assert '"do"' in str(messages[0].content) and '"observe <location>"' in str(messages[0].content)


def test_the_plan_format_follows_the_backend_unless_set() -> None:
    assert PlannerConfig(llm_backend="local").plans_in_steps
    assert PlannerConfig(llm_backend="local_inprocess").plans_in_steps
    assert not PlannerConfig(llm_backend="openai").plans_in_steps
    assert PlannerConfig(llm_backend="openai", plan_format="steps").plans_in_steps
    assert not PlannerConfig(llm_backend="local", plan_format="full").plans_in_steps
    with pytest.raises(ValueError, match="plan format"):
        PlannerConfig(plan_format="compact")
