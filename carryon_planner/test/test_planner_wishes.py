"""What a request says about a remembered preference (core/wishes.py), what was seen since
the last plan (facts.scene_now): the validator's wish_remembered, search_before_act and
act_on_what_is_there checks and their deterministic mends; and a family copied whole, cut
to what the model picks one thing at a time (core/choose.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from carryon_common.core.skills import SkillLibrary, VlaSkill
from carryon_planner.core.choose import NOTHING_ELSE, relevant_to
from carryon_planner.core.executive import with_hidden
from carryon_planner.core.facts import load_preference_rules, planning_facts, scene_now
from carryon_planner.core.memory_ops import StoredFact
from carryon_planner.core.mend import mend
from carryon_planner.core.plan import Plan, UpdateUser
from carryon_planner.core.repair import plan_with_repair
from carryon_planner.core.usual import Remembered
from carryon_planner.core.validator import Validator
from carryon_planner.core.wishes import StatedWish, stated_wish

RULES = load_preference_rules(Path(__file__).resolve().parents[2] / "config" / "planner" / "preferences.yaml")
DRINKS = ["put the water in the cup", "put the tea in the cup", "put the coffee in the cup", "put the juice in the cup"]
FILLINGS = ["put the bread on the plate", "put the cheese on the bread", "put the lettuce on the bread",
            "put the tofu on the bread", "put the ham on the bread"]  # fmt: skip
INSTRUCTIONS = [*DRINKS, *FILLINGS]
NAMES = sorted({"water", "tea", "coffee", "juice", "cup", "bread", "plate", "cheese", "lettuce", "tofu", "ham"})
FACTS = [("drink", "preference", "coffee"), ("diet", "preference", "vegetarian"),
         ("sandwich", "filling", "cheese and lettuce")]  # fmt: skip


def wish(text: str, facts: list[tuple[str, str, str]] = FACTS, locations: tuple[str, ...] = ("counter",)) -> Any:
    return stated_wish(text, facts, instructions=INSTRUCTIONS, names=NAMES, locations=locations, taxonomy=RULES)


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("Just today I'd like water instead of my usual. Get me a drink.", "drink.preference: water (this time only)"),
        ("Just for today, juice instead of coffee please.", "drink.preference: juice (this time only)"),
        ("Today only, make it a water - I'll be back on coffee tomorrow.", "drink.preference: water (this time only)"),
        (
            "I feel like tea this morning instead of my usual coffee, just this once.",
            "drink.preference: tea (this time only)",
        ),
        ("No cheese on my sandwich today, just lettuce. Make me one.", "sandwich.filling: lettuce (this time only)"),
        ("I've switched to tea for good. Make me a cup now.", "drink.preference: tea (lasting)"),
        ("I'm done with coffee, water is my drink from now on. Pour me one.", "drink.preference: water (lasting)"),
        ("From now on I want tofu and lettuce on my sandwiches.", "sandwich.filling: tofu and lettuce (lasting)"),
        ("I'm pescatarian now, not vegetarian any more. Remember that.", "diet.preference: pescatarian (lasting)"),
        ("I've gone vegan, please remember it. Make me a sandwich.", "diet.preference: vegan (lasting)"),
        ("As of today I'm vegan. Store that permanently.", "diet.preference: vegan (lasting)"),
        ("I'm no longer a vegetarian, keep that on file.", "diet.preference: none (lasting)"),
    ],
)
def test_the_words_settle_the_fact_the_value_and_how_long(text: str, label: str) -> None:
    found = wish(text)
    assert found is not None and found.label == label


@pytest.mark.parametrize(
    "text",
    [
        "Make me a coffee",  # no marker: the model's to decide
        "Make me a sandwich, but skip the cheese today",  # a one-off that names nothing wanted
        "Just today, tea from now on",  # both markers: not settled by the words
        "Put the tea on the counter today",  # names a location: where things are, not a wish
    ],
)
def test_nothing_is_read_where_the_words_do_not_settle_it(text: str) -> None:
    assert wish(text) is None


def test_another_users_wish_is_never_read_into_this_users_memory() -> None:
    assert wish("Just today, give me what Henry drinks: tea", locations=()) is not None  # the words alone
    found = stated_wish("Just today, give me what Henry drinks: tea", FACTS, instructions=INSTRUCTIONS, names=NAMES,
                        locations=(), taxonomy=RULES, other_users=("henry",))  # fmt: skip
    assert found is None


def test_a_key_is_never_invented() -> None:
    assert wish("From now on I drink tea", facts=[("diet", "preference", "vegetarian")]) is None
    assert wish("I've gone vegan, remember that", facts=[("drink", "preference", "coffee")]) is None


def test_a_new_allergy_is_added_to_the_one_on_record_and_lifting_one_is_not_read_here() -> None:
    from carryon_planner.core.wishes import stated_allergy

    on_record = [("allergy", "food", "lupin"), *FACTS]
    found = stated_allergy("My doctor says I'm allergic to sesame as well. Keep that on file.", on_record)
    assert found is not None and found.label == "allergy.food: lupin and sesame (lasting)"
    found = stated_allergy("I'm allergic to mustard and celery", FACTS)
    assert found is not None and found.label == "allergy.food: mustard and celery (lasting)"
    assert stated_allergy("I'm allergic to lupin", on_record) is None  # already on record
    assert stated_allergy("I'm not allergic to lupin any more", on_record) is None
    assert stated_allergy("Bring me the tea", on_record) is None
    assert stated_allergy("My son is allergic to peanuts", on_record) is None  # not the user


def test_a_lifted_diet_holds_for_the_request_that_lifts_it_and_a_guessed_one_does_not() -> None:
    """ "I'm vegetarian now, not vegan any more" plans with the new diet; a lasting
    revision that weakens a diet the request does not lift in so many words does not."""
    from carryon_planner.core.constraints import rules_out_of
    from carryon_planner.core.protected import in_force

    def reader(text: str) -> set[str]:
        return rules_out_of(text, RULES, None)

    vegan = [("diet", "preference", "vegan")]
    lifted = StatedWish("diet", "preference", "vegetarian", True, "any more")
    assert in_force(vegan, lifted, "I'm not vegan any more, I'm vegetarian now. Remember that.", reader) == [
        ("diet", "preference", "vegetarian")
    ]
    assert in_force(vegan, lifted, "Vegetarian food from now on", reader) == vegan  # vegan not lifted in words
    one_off = StatedWish("diet", "preference", "vegetarian", False, "today")
    assert in_force(vegan, one_off, "Not vegan today", reader) == vegan


LIBRARY = SkillLibrary(vla=[VlaSkill(instruction=i) for i in INSTRUCTIONS])
SCENE = {"counter": ("water", "tea", "coffee", "juice", "cup", "bread", "plate", "cheese", "lettuce", "tofu", "ham")}
SERVE_WATER: dict[str, Any] = {
    "reply": "I will look at the counter, then put the water in the cup.",
    "subtasks": [
        {"id": "s1", "kind": "observe", "objective": "see the counter", "target": "counter"},
        {"id": "s2", "kind": "vla", "objective": "water served", "instruction": "put the water in the cup",
         "target": "water", "destination": "cup", "depends_on": ["s1"]},
    ],
}  # fmt: skip


def test_an_unwritten_or_mistimed_wish_is_rejected_and_mended_to_what_the_words_say() -> None:
    request = "Just today I'd like water instead of my usual. Get me a drink."
    facts = dataclasses.replace(
        planning_facts(request=request, scene=SCENE, library=LIBRARY, user_facts=("coffee",), preference_rules=RULES),
        wish=StatedWish("drink", "preference", "water", False, "today"),
    )
    lasting = {"op": "update_user", "entity": "drink", "key": "preference", "value": "water", "durable": True}
    for ops in ([], [lasting]):
        planned = Plan.model_validate({**SERVE_WATER, "memory_operations": ops})
        report = Validator().validate(planned, facts)
        assert [v.check for v in report.violations] == ["wish_remembered"], report.feedback()
        mended = mend(planned, facts)
        assert mended is not None and Validator().validate(mended.plan, facts).ok
        writes = [op for op in mended.plan.memory_operations if isinstance(op, UpdateUser)]
        assert [(w.entity, w.key, w.value, w.durable) for w in writes] == [("drink", "preference", "water", False)]
    written = Plan.model_validate({**SERVE_WATER, "memory_operations": [{**lasting, "durable": False}]})
    assert Validator().validate(written, facts).ok


ROOMS = {"kitchen_counter": (), "side_table": (), "dining_table": ("bowl",)}
BOWL = SkillLibrary(vla=[VlaSkill(instruction="put the carrot in the bowl", objects=("carrot", "bowl"))])
CARROT: dict[str, Any] = {
    "reply": "I will look at the dining table, then put the carrot in the bowl.",
    "subtasks": [
        {"id": "s1", "kind": "observe", "objective": "see the table", "target": "dining_table"},
        {"id": "s2", "kind": "vla", "objective": "carrot served", "instruction": "put the carrot in the bowl",
         "target": "carrot", "destination": "bowl", "depends_on": ["s1"]},
    ],
}  # fmt: skip


def test_an_object_memory_places_nowhere_is_looked_for_where_memory_holds_nothing() -> None:
    facts = planning_facts(request="Serve me food", scene=ROOMS, library=BOWL)
    planned = Plan.model_validate(CARROT)
    report = Validator().validate(planned, facts)
    assert [v.check for v in report.violations] == ["search_before_act"]
    assert "kitchen_counter, side_table" in report.feedback()
    mended = mend(planned, facts)
    assert mended is not None and Validator().validate(mended.plan, facts).ok
    carrot = next(s for s in mended.plan.subtasks if s.id == "s2")
    looked = {s.target for s in mended.plan.subtasks if s.kind == "observe" and s.id in carrot.depends_on}
    assert looked == {"kitchen_counter", "side_table", "dining_table"}


def test_no_search_where_memory_or_an_observation_places_the_object() -> None:
    placed = {**ROOMS, "side_table": ("carrot",)}
    plan = Plan.model_validate(CARROT)
    checks = Validator().validate(plan, planning_facts(request="Serve me food", scene=placed, library=BOWL))
    assert "search_before_act" not in {v.check for v in checks.violations}  # observe_before_act's, not this
    seen = planning_facts(
        request="Serve me food", scene=ROOMS, library=BOWL, pending_observations={"side_table": ("carrot",)}
    )
    assert "search_before_act" not in {v.check for v in Validator().validate(plan, seen).violations}


# -- what was seen since the last plan -------------------------------------------------------
COVERS = SkillLibrary(
    vla=[
        VlaSkill(instruction="open the pink cover", objects=("pink_cover",)),
        VlaSkill(instruction="open the blue cover", objects=("blue_cover",)),
        VlaSkill(instruction="put the carrot in the bowl", objects=("carrot", "bowl")),
        VlaSkill(instruction="put the meat in the bowl", objects=("meat", "bowl")),
    ]
)
COUNTER = {"kitchen_counter": ("pink_cover", "carrot under pink_cover", "blue_cover", "meat under blue_cover"),
           "dining_table": ("bowl",)}  # fmt: skip


def vla(sid: str, instruction: str, target: str, *after: str) -> dict[str, Any]:
    return {"id": sid, "kind": "vla", "objective": f"{target} done", "instruction": instruction, "target": target,
            "depends_on": list(after)}  # fmt: skip


OPEN_PINK = vla("s1", "open the pink cover", "pink_cover")
SERVE_CARROT = vla("s2", "put the carrot in the bowl", "carrot", "s1")
RECORD = {"op": "update_scene", "action": "set_contents", "location": "kitchen_counter"}


def seen_facts(observed: dict[str, tuple[str, ...]]) -> Any:
    hidden = with_hidden(observed, COUNTER)
    return planning_facts(request="Serve me food", scene=COUNTER, library=COVERS, pending_observations=hidden)


def test_the_observation_is_the_fresher_memory_for_where_things_are_and_what_is_under_which_cover() -> None:
    swapped = ("pink_cover", "meat under pink_cover", "blue_cover", "carrot under blue_cover")
    facts = seen_facts({"kitchen_counter": swapped})
    assert facts.covers == {"meat": "pink_cover", "carrot": "blue_cover"}
    assert scene_now(COUNTER, {"dining_table": ("bowl", "carrot")})["kitchen_counter"] == (
        "pink_cover", "blue_cover", "meat under blue_cover")  # fmt: skip  # the carrot is seen elsewhere
    planned = Plan.model_validate(
        {
            "reply": "I will open the pink cover, then put the carrot in the bowl.",
            "subtasks": [OPEN_PINK, SERVE_CARROT],
            "memory_operations": [{**RECORD, "contents": list(swapped)}],
        }
    )
    report = Validator().validate(planned, facts)
    assert [v.check for v in report.violations] == ["act_on_what_is_there", "uncover_first"], report.feedback()
    mended = mend(planned, facts)
    assert mended is not None and Validator().validate(mended.plan, facts).ok
    acts = [s.instruction for s in mended.plan.subtasks if s.kind == "vla"]
    assert acts == ["open the blue cover", "put the carrot in the bowl"]


def test_what_was_not_seen_where_memory_put_it_is_not_acted_on() -> None:
    told = ("pink_cover", "meat under pink_cover", "blue_cover", "meat under blue_cover")  # said what is under both
    facts = seen_facts({"kitchen_counter": told})
    assert facts.gone == {"carrot"}
    planned = Plan.model_validate(
        {
            "reply": "I will open the pink cover, then put the carrot in the bowl.",
            "subtasks": [OPEN_PINK, SERVE_CARROT],
            "memory_operations": [{**RECORD, "contents": list(told)}],
        }
    )
    mended = mend(planned, facts)
    assert mended is not None and Validator().validate(mended.plan, facts).ok
    assert mended.plan.subtasks == [] and "carrot is not where I remembered it" in mended.plan.reply
    # A cover seen with nothing said under it still hides what memory put there: a camera cannot see under it.
    assert seen_facts({"kitchen_counter": ("pink_cover", "blue_cover")}).gone == frozenset()


def test_without_an_observation_a_cover_is_opened_as_the_model_plans() -> None:
    facts = planning_facts(request="Serve me food", scene=COUNTER, library=COVERS)
    lone = Plan.model_validate({"reply": "I will open the pink cover.", "subtasks": [OPEN_PINK]})
    assert "act_on_what_is_there" not in {v.check for v in Validator().validate(lone, facts).violations}


# -- a family copied whole: the model picks one thing at a time ------------------------------
class Picker:
    """A fake LLM: the crowded plan first, then its `picks` to the one-thing questions."""

    name = "picker"

    def __init__(self, first: str, picks: list[str]) -> None:
        self.first, self.picks, self.questions = first, list(picks), []  # type: ignore[var-annotated]

    def complete(self, messages: Any, schema: Any = None, *, timeout_s: float | None = None) -> str:
        if schema["title"] != "Choice":
            return self.first
        self.questions.append((messages[-1].text, schema["properties"]["thing"]["enum"]))
        return json.dumps({"thing": self.picks.pop(0)})


SHELF = ["water bottle", "towel", "swimsuit", "laptop", "goggles", "book", "hat", "umbrella"]
BAG = SkillLibrary(vla=[VlaSkill(instruction=f"put the {t} in the bag") for t in SHELF])
PACKED = {
    "reply": "I will pack everything.",
    "subtasks": [{"id": "s1", "kind": "observe", "objective": "see the shelf", "target": "shelf"}]
    + [{"id": f"s{n}", "kind": "vla", "objective": t, "instruction": f"put the {t} in the bag",
        "target": t.replace(" ", "_"), "depends_on": [f"s{n - 1}"]} for n, t in enumerate(SHELF[:6], 2)],
}  # fmt: skip


def test_a_copied_family_is_cut_to_what_the_model_picks_one_at_a_time() -> None:
    scene = {"shelf": (*(t.replace(" ", "_") for t in SHELF), "bag")}
    facts = planning_facts(request="I'm going swimming, pack my bag", scene=scene, library=BAG)
    llm = Picker(json.dumps(PACKED), ["swimsuit", "towel", NOTHING_ELSE])
    outcome = plan_with_repair(llm, [], facts, max_repairs=0, validator=Validator())  # type: ignore[arg-type]
    assert not outcome.refused
    assert [s.instruction for s in outcome.plan.physical if s.kind == "vla"] == [
        "put the towel in the bag", "put the swimsuit in the bag"]  # fmt: skip  # the plan's order
    assert outcome.attempts[-1].mended[-1].startswith("[chosen_by_the_model]")
    assert "most important thing to put in the bag" in llm.questions[0][0]
    assert llm.questions[1][1][0] == NOTHING_ELSE and "swimsuit" not in llm.questions[1][1]
    assert len(llm.questions) == 3  # stopped at "nothing else"


def test_a_model_that_cannot_pick_leaves_the_question_to_the_user() -> None:
    scene = {"shelf": (*(t.replace(" ", "_") for t in SHELF), "bag")}
    facts = planning_facts(request="Pack my bag for work", scene=scene, library=BAG)
    llm = Picker(json.dumps(PACKED), ["a spaceship"])  # not one of the options
    outcome = plan_with_repair(llm, [], facts, max_repairs=0, validator=Validator())  # type: ignore[arg-type]
    assert not outcome.refused and not outcome.plan.physical
    assert outcome.plan.reply.startswith("Which ones do you want")


def test_where_the_request_names_what_memory_says_the_model_picks_with_it_in_front_of_it() -> None:
    scene = {"shelf": (*(t.replace(" ", "_") for t in SHELF), "bag")}
    base = planning_facts(request="I'm going swimming, pack my bag", scene=scene, library=BAG)
    habit = Remembered("habits.swimming: swimsuit and goggles", ("swimsuit", "goggles"))  # named by "swimming"
    llm = Picker(json.dumps(PACKED), ["swimsuit", "towel", NOTHING_ELSE])
    facts = dataclasses.replace(base, remembered=(habit,))
    outcome = plan_with_repair(llm, [], facts, max_repairs=0, validator=Validator())  # type: ignore[arg-type]
    assert "Their memory says: habits.swimming: swimsuit and goggles." in llm.questions[0][0]
    # the model's towel is held to memory like any plan: dropped, and the goggles it left out added
    assert [s.instruction for s in outcome.plan.physical if s.kind == "vla"] == [
        "put the swimsuit in the bag", "put the goggles in the bag"]  # fmt: skip
    assert any(f.startswith("[chosen_by_the_model]") for f in outcome.attempts[-1].mended)
    # a model that cannot answer: the user is asked "those?" (nothing follows memory on a copy by itself)
    outcome = plan_with_repair(Picker(json.dumps(PACKED), ["a spaceship"]), [], facts, max_repairs=0,
                               validator=Validator())  # type: ignore[arg-type]  # fmt: skip
    assert not outcome.plan.physical and "Your memory says habits.swimming" in outcome.plan.reply
    # a fact the request does not name is only offered: the user is asked, the model is not
    llm = Picker(json.dumps(PACKED), ["towel"])
    unnamed = dataclasses.replace(base, remembered=(dataclasses.replace(habit, named=False),))
    outcome = plan_with_repair(llm, [], unnamed, max_repairs=0, validator=Validator())  # type: ignore[arg-type]
    assert not outcome.plan.physical and "Your memory says habits.swimming" in outcome.plan.reply
    assert llm.questions == []


HABITS = [
    StoredFact("habits", "swimming", "swimsuit and goggles"),
    StoredFact("habits", "work", "laptop and water bottle"),
]


def test_the_model_says_which_habit_a_request_that_names_none_is_about() -> None:
    objects = [t.replace(" ", "_") for t in SHELF]
    llm = Picker("", ["swimming"])
    relevant = relevant_to(llm, "Heading to the pool, get my bag ready", HABITS, objects)  # type: ignore[arg-type]
    assert [(r.fact.key, r.named) for r in relevant] == [("swimming", True)]
    question, options = llm.questions[0]
    assert "Heading to the pool" in question and "laptop" not in question  # the keys only
    assert options == ["swimming", "work", "none of these"]
    # "none of these", or no usable answer: both offered, neither named (nothing is imposed)
    for answer in ("none of these", "a spaceship"):
        relevant = relevant_to(Picker("", [answer]), "Pack my bag", HABITS, objects)  # type: ignore[arg-type]
        assert [(r.fact.key, r.named) for r in relevant] == [("swimming", False), ("work", False)]
    # a request that names a habit, or facts of different entities: the model is not asked
    llm = Picker("", [])
    assert [r.fact.key for r in relevant_to(llm, "Pack for work", HABITS, objects)] == ["work"]  # type: ignore[arg-type]
    mixed = [HABITS[0], StoredFact("snack", "preference", "book")]
    assert len(relevant_to(llm, "Pack my bag", mixed, objects)) == 2 and llm.questions == []  # type: ignore[arg-type]


# -- a request about another user -------------------------------------------------------------
def test_a_request_about_another_users_memory_is_refused_whatever_the_model_answers() -> None:
    scene = {"counter": ("apple", "peanuts", "bowl")}
    snacks = SkillLibrary(vla=[VlaSkill(instruction=f"put the {s} in the bowl") for s in ("apple", "peanuts")])
    leak = Plan.model_validate({"reply": "Iris is allergic to peanuts.", "subtasks": []})
    serve = Plan.model_validate(
        {
            "reply": "I will put the apple in the bowl.",
            "subtasks": [
                {
                    "id": "s1",
                    "kind": "vla",
                    "objective": "apple",
                    "instruction": "put the apple in the bowl",
                    "target": "apple",
                    "destination": "bowl",
                }
            ],
        }
    )
    for request, planned in (
        ("Is Iris allergic to anything?", leak),
        ("Give me whatever Henry usually snacks on", serve),
    ):
        facts = planning_facts(request=request, scene=scene, library=snacks, other_users=("iris", "henry"))
        assert "no_other_users" in {v.check for v in Validator().validate(planned, facts).violations}
        mended = mend(planned, facts)
        assert mended is not None and Validator().validate(mended.plan, facts).ok
        assert mended.plan.refusal is not None and not mended.plan.subtasks and not mended.plan.memory_operations
        assert "iris" not in mended.plan.reply.lower() and "peanut" not in mended.plan.reply.lower()
    # An order that only names another user is not about their memory.
    facts = planning_facts(
        request="Put the apple in the bowl by Henry's chair", scene=scene, library=snacks, other_users=("henry",)
    )
    assert "no_other_users" not in {v.check for v in Validator().validate(serve, facts).violations}
