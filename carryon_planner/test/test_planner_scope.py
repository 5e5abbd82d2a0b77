"""Plans act on what was asked (core/scope.py): what the request names is not left out,
and a closed request gets nothing it did not ask for."""

from __future__ import annotations

from typing import Any

from carryon_common.core.skills import SkillLibrary, VlaSkill
from carryon_planner.core.facts import planning_facts
from carryon_planner.core.mend import mend
from carryon_planner.core.plan import Plan
from carryon_planner.core.scope import is_closed, requested
from carryon_planner.core.taxonomy import Taxonomy
from carryon_planner.core.validator import Validator

RULES = Taxonomy(kinds={"meat": ("ham",)}, diets={"vegetarian": ("meat",)}, rules_out={})
LIBRARY = SkillLibrary(
    vla=[
        VlaSkill(instruction="put the bread on the plate", objects=("bread", "plate")),
        VlaSkill(instruction="put the ham on the bread", objects=("ham", "bread")),
        VlaSkill(instruction="put the cheese on the bread", objects=("cheese", "bread")),
        VlaSkill(instruction="pour the tea into the cup", objects=("tea", "cup")),
        VlaSkill(instruction="pour the coffee into the cup", objects=("coffee", "cup")),
        VlaSkill(instruction="pack the towel in the bag", objects=("towel", "bag")),
    ]
)
SCENE = {"counter": ["bread", "ham", "cheese", "plate", "tea", "coffee", "cup", "towel", "bag"]}


def facts(request: str, user_facts: tuple[str, ...] = ()) -> Any:
    return planning_facts(request=request, scene=SCENE, library=LIBRARY, user_facts=user_facts, preference_rules=RULES)


def plan(*instructions: str) -> Plan:
    look = {"id": "s0", "kind": "observe", "objective": "see the counter", "target": "counter"}
    subtasks: list[dict[str, Any]] = [look]
    for i, instruction in enumerate(instructions, 1):
        target = next(s.objects[0] for s in LIBRARY.vla if s.instruction == instruction)
        subtasks.append({"id": f"s{i}", "kind": "vla", "objective": instruction, "instruction": instruction,
                         "target": target, "depends_on": [subtasks[-1]["id"]]})  # fmt: skip
    reply = "I will look at the counter, then " + ", then ".join(instructions) + "." if instructions else "I will look."
    return Plan.model_validate({"reply": reply, "subtasks": subtasks, "memory_operations": []})


def checks(p: Plan, f: Any) -> list[str]:
    return [v.check for v in Validator().validate(p, f).violations]


def test_what_the_request_names_is_read_with_its_alternatives_and_open_phrases() -> None:
    assert requested(facts("Bring me the tea or the coffee, and the cheese")) == [["tea", "coffee"], ["cheese"]]
    assert requested(facts("Bring me the tea, not the coffee")) == [["tea"]]
    assert is_closed(facts("Some tea and the cheese, please"))
    assert not is_closed(facts("The tea and something to eat, please"))
    assert not is_closed(facts("Make me a sandwich"))  # names nothing the robot hands over


def test_a_plan_that_leaves_out_what_the_request_names_is_not_dispatched() -> None:
    """ "Tea and cheese" answered with the tea alone (or with looks alone): the LLM is told
    what it left out; one of two alternatives is enough."""
    f = facts("Bring me the tea and the cheese on bread")
    assert "acts_on_request" in checks(plan("pour the tea into the cup"), f)
    assert "acts_on_request" in checks(plan(), f)
    mended = mend(plan(), f)  # nothing a deterministic repair can choose: the LLM's turn
    assert mended is None or "acts_on_request" in checks(mended.plan, f)
    full = plan("pour the tea into the cup", "put the bread on the plate", "put the cheese on the bread")
    assert "acts_on_request" not in checks(full, f)
    either = facts("Bring me the tea or the coffee")
    assert "acts_on_request" not in checks(plan("pour the coffee into the cup"), either)


def test_what_the_preferences_rule_out_may_be_left_out() -> None:
    f = facts("Bring me the ham and the cheese on bread", user_facts=("vegetarian",))
    assert "acts_on_request" not in checks(plan("put the bread on the plate", "put the cheese on the bread"), f)


def test_a_closed_request_gets_nothing_it_did_not_ask_for() -> None:
    """ "The cheese on bread" answered with the towel packed too: the towel is dropped and
    the reply says what is left; the bread the cheese goes on stays (what it builds on)."""
    f = facts("Put the cheese on the bread for me")
    extra = plan("put the bread on the plate", "put the cheese on the bread", "pack the towel in the bag")
    assert "acts_on_request" in checks(extra, f)
    mended = mend(extra, f)
    assert mended is not None and [s.instruction for s in mended.plan.subtasks if s.kind == "vla"] == [
        "put the bread on the plate",
        "put the cheese on the bread",
    ]
    assert "towel" not in mended.plan.reply and any("does not ask for towel" in fix for fix in mended.fixes)
    assert Validator().validate(mended.plan, f).ok


def test_an_open_request_leaves_the_choice_to_the_model() -> None:
    f = facts("The cheese and something to drink, please")
    assert "acts_on_request" not in checks(plan("put the cheese on the bread", "pour the tea into the cup"), f)
