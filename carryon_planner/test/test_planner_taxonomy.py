"""Preferences by meaning: a diet, an allergy or a stated wish rules out every object of its
kind, however the object is named, and nothing it does not (config/planner/preferences.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from carryon_common.core.errors import ConfigError
from carryon_common.core.skills import SkillLibrary, VlaSkill
from carryon_planner.core.facts import planning_facts, preference_texts
from carryon_planner.core.plan import parse_plan
from carryon_planner.core.taxonomy import Taxonomy, load_taxonomy, request_wishes, ruled_out
from carryon_planner.core.validator import Validator

TAXONOMY = load_taxonomy(Path(__file__).resolve().parents[2] / "config" / "planner" / "preferences.yaml")
NAMES = [
    "turkey_slices", "chorizo", "ham", "meat", "salmon", "shrimp", "steak", "chicken_nuggets", "hot_dog",
    "marshmallows", "carrot", "eggplant", "veggie_burger", "almond_milk", "soy_milk", "peanut_butter",
    "mixed_nuts", "butternut_squash", "cheese", "ice_cream", "milk", "lactose_free_milk", "bread",
    "gluten_free_bread", "egg_noodles", "beer", "bacon", "mushroom_soup", "pink_cover", "bowl",
]  # fmt: skip


@pytest.mark.parametrize(
    ("fact", "expected"),
    [
        ("vegetarian", {"turkey_slices", "chorizo", "ham", "meat", "salmon", "shrimp", "steak", "chicken_nuggets",
                        "hot_dog", "marshmallows", "bacon"}),
        ("strict vegan", {"turkey_slices", "chorizo", "ham", "meat", "salmon", "shrimp", "steak", "chicken_nuggets",
                          "hot_dog", "marshmallows", "bacon", "cheese", "ice_cream", "milk", "lactose_free_milk",
                          "egg_noodles"}),
        ("pescatarian", {"turkey_slices", "chorizo", "ham", "meat", "steak", "chicken_nuggets", "hot_dog",
                         "marshmallows", "bacon"}),
        ("allergic to peanuts", {"peanut_butter"}),
        ("nut allergy", {"peanut_butter", "mixed_nuts", "almond_milk"}),
        ("lactose intolerant", {"cheese", "ice_cream", "milk"}),  # lactose-free milk is fine
        ("dairy-free", {"cheese", "ice_cream", "milk", "lactose_free_milk"}),
        ("gluten-free", {"bread", "egg_noodles", "beer"}),
        ("halal", {"ham", "chorizo", "bacon", "beer", "marshmallows"}),
        ("diet preference: no red meat", {"ham", "chorizo", "bacon", "steak"}),
        ("doesn't eat pork", {"ham", "chorizo", "bacon"}),
        ("hates mushrooms", {"mushroom_soup"}),  # a word the taxonomy does not know stands for itself
        ("no longer vegetarian", set()),
        ("done being vegetarian", set()),
        ("no cheese on weekdays", {"cheese"}),  # the thing a wish names ends at "on", "today", ...
        ("not a vegan", set()),
        ("likes ham", set()),
    ],
)  # fmt: skip
def test_a_fact_rules_out_every_object_of_its_kind_and_nothing_else(fact: str, expected: set[str]) -> None:
    assert set(ruled_out(NAMES, [fact], TAXONOMY)) == expected


@pytest.mark.parametrize(
    ("said", "expected"),
    [
        ("I've gone vegan, please remember it. Make me a sandwich.", {"cheese", "ham", "milk", "steak"}),
        ("I'm pescatarian now, not vegetarian any more. Remember that.", {"ham", "steak"}),
        ("Make me a sandwich, but skip the cheese today", {"cheese"}),
        ("No cheese on my sandwich today, just milk. Make me one.", {"cheese"}),
        ("I'm done with milk, water is my drink from now on. Pour me one.", {"milk"}),
        ("Just for today, milk instead of beer please.", {"beer"}),
        ("Just today I'd like milk instead of my usual. Get me a drink.", set()),
        ("I'm not vegetarian any more. Make me a ham sandwich", set()),
        ("Serve me food", set()),
        ("Put the cheese on the bread", set()),
    ],
)  # fmt: skip
def test_what_a_request_states_rules_out_for_that_request(said: str, expected: set[str]) -> None:
    """Seen with the local model: "I've gone vegan ... Make me a sandwich" served cheese (memory
    still said vegetarian: the plan had not written vegan), one of the two forbidden
    dispatches of the full personalization bench."""
    names = ["cheese", "ham", "milk", "steak", "beer", "bread", "lettuce"]
    assert set(ruled_out(names, request_wishes(said), TAXONOMY)) == expected


def test_a_clause_about_where_things_are_is_no_wish() -> None:
    said = "The milk is on the sofa instead of the shelf. Put it back, no beer please"
    assert request_wishes(said, ["shelf", "sofa"]) == ["you said: put it back", "you said: no beer please"]
    assert set(ruled_out(["milk", "beer", "put the milk on the shelf"], request_wishes(said, ["shelf"]), TAXONOMY)) == {
        "beer"
    }


def test_names_are_read_word_by_word_longest_phrase_first() -> None:
    assert {"turkey", "poultry", "meat"} <= TAXONOMY.kinds_of("turkey_slices")
    assert "dairy" not in TAXONOMY.kinds_of("peanut_butter") and "nuts" in TAXONOMY.kinds_of("peanut butter")
    assert "egg" not in TAXONOMY.kinds_of("eggplant") and "beef" not in TAXONOMY.kinds_of("veggie_burger")
    assert "gluten" not in TAXONOMY.kinds_of("gluten_free_bread")  # what the name says it is free of
    assert TAXONOMY.unknown_words("pink_cover") == ["pink", "cover"] and TAXONOMY.unknown_words("ham") == []
    why = TAXONOMY.rules_out_name("turkey_slices", ["likes music", "vegetarian"])
    assert why == "vegetarian: turkey slices is meat"


def test_the_older_exact_table_still_applies() -> None:
    table = Taxonomy(kinds={"meat": ("ham",)}, diets={}, rules_out={"no red food": ("tomato",)})
    assert ruled_out(["tomato", "ham"], ["No red food"], table) == {"tomato": "No red food"}


def test_a_broken_taxonomy_names_its_problem(tmp_path: Path) -> None:
    bad = tmp_path / "preferences.yaml"
    bad.write_text("kinds: {meat: [ham]}\ndiets: {vegetarian: [meat, fish]}\n")
    with pytest.raises(ConfigError, match="diets name kinds that `kinds` does not define: fish"):
        load_taxonomy(bad)
    bad.write_text("kinds: [meat]\n")
    with pytest.raises(ConfigError, match="expected 'kinds: "):
        load_taxonomy(bad)


def test_the_validator_refuses_an_object_of_an_excluded_kind_named_anyhow() -> None:
    """From the user's stored facts (entity, key, value) to the validator's verdict: a nut
    allergy stored as `## allergy - food: peanuts` refuses the peanut butter, whatever the
    instruction calls it, and lets the carrot through."""
    library = SkillLibrary(
        vla=[
            VlaSkill(instruction="put the peanut butter in the bowl", objects=("peanut_butter", "bowl")),
            VlaSkill(instruction="put the carrot in the bowl", objects=("carrot", "bowl")),
            VlaSkill(instruction="hand over the turkey slices", objects=("turkey_slices",)),
        ]
    )
    stored = [("allergy", "food", "peanuts"), ("diet", "preference", "vegetarian")]
    facts = planning_facts(
        request="Give me a snack",
        scene={"dining_table": ("bowl", "carrot", "peanut_butter", "turkey_slices")},
        library=library,
        user_facts=[value for _e, _k, value in stored],
        preference_rules=TAXONOMY,
        preferences=preference_texts(stored),
    )

    def verdict(instruction: str, target: str) -> list[str]:
        step = {"id": "s1", "kind": "vla", "objective": "served", "instruction": instruction, "target": target}
        plan = parse_plan(json.dumps({"reply": "Here you go.", "subtasks": [step]}))
        return [v.message for v in Validator().validate(plan, facts).violations if v.check == "preference_conflict"]

    (peanut,) = verdict("put the peanut butter in the bowl", "peanut_butter")
    assert "allergy food: peanuts" in peanut
    (turkey,) = verdict("hand over the turkey slices", "")  # no target: the instruction's words say it
    assert "diet preference: vegetarian" in turkey and "meat" in turkey
    assert verdict("put the carrot in the bowl", "carrot") == []
    # The instruction is read as a phrase, longest first: peanut butter is no butter.
    lactose = planning_facts(request="Make me a sandwich", scene={"counter": ("peanut_butter", "butter")},
                             library=SkillLibrary(vla=[VlaSkill(instruction="put the peanut butter on the bread"),
                                                       VlaSkill(instruction="put the butter on the bread")]),
                             user_facts=["lactose intolerant"], preference_rules=TAXONOMY)  # fmt: skip
    assert set(lactose.ruled_out) == {"butter", "put the butter on the bread"}


def test_the_validator_reads_the_request_as_well_as_memory() -> None:
    library = SkillLibrary(vla=[VlaSkill(instruction=f"put the {n} on the bread") for n in ("cheese", "lettuce")])
    facts = planning_facts(
        request="I've gone vegan, please remember it. Make me a sandwich.",
        scene={"counter": ["cheese", "lettuce", "bread"]},
        library=library,
        user_facts=["vegetarian"],
        preference_rules=TAXONOMY,
    )
    assert facts.ruled_out["cheese"] == "you said: i've gone vegan: cheese is dairy"
    assert "lettuce" not in facts.ruled_out and "put the cheese on the bread" in facts.ruled_out
