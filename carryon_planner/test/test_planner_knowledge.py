"""Food knowledge with provenance (core/knowledge.py): yes / no / unknown, and from where."""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_common.core.errors import ConfigError
from carryon_planner.core.knowledge import Answer, Confirmation, FoodKnowledge
from carryon_planner.core.knowledge_file import load_food_knowledge

CONFIG = Path(__file__).resolve().parents[2] / "config"

SMALL = """
kinds:
  gluten: {aka: [wheat, rye]}
  milk: {aka: [dairy], implies: [lactose], free_words: [dairy]}
  lactose: {separable: true}
  sesame: {}
  tree_nuts: {aka: [tree nuts, nuts]}
  peanuts: {aka: [peanut, nuts]}
  meat: {}
  pork: {implies: [meat]}
  beef: {implies: [meat]}
  fish: {}
foods:
  flatbread: {is: [gluten]}
  hummus: {is: [sesame], aka: [houmous], note: chickpeas and tahini}
  brownie: {is: [gluten, milk], may: [tree_nuts, peanuts]}
  stew: {may: ["*"]}
  lactose-free milk: {is: [milk], free_of: [lactose]}
  milk: {is: [milk]}
  sausage: {is: [meat], may: [gluten]}
  chorizo: {is: [pork]}
  rice: {}
  cucumber: {}
not_food: [plate, tea towel, laptop]
describing_words: [warm, blue, the, of]
vessels: [plate]
diets:
  vegan: [meat, fish, milk]
  vegetarian: [meat, fish]
"""


@pytest.fixture()
def knowledge(tmp_path: Path) -> FoodKnowledge:
    path = tmp_path / "food_knowledge.yaml"
    path.write_text(SMALL)
    return load_food_knowledge(path)


def answer(k: FoodKnowledge, name: str, kind: str) -> Answer:
    return k.contains(name, kind).answer


def test_an_entry_says_yes_no_or_maybe_and_cites_itself(knowledge: FoodKnowledge) -> None:
    verdict = knowledge.contains("hummus", "sesame")
    assert verdict.answer == Answer.YES and "hummus is sesame (chickpeas and tahini)" in verdict.source
    assert answer(knowledge, "houmous", "sesame") == Answer.YES  # another name of it
    assert answer(knowledge, "hummus", "milk") == Answer.NO  # entries are complete
    assert answer(knowledge, "bake_sale_brownies", "tree_nuts") == Answer.UNKNOWN  # recipes vary
    assert answer(knowledge, "brownies", "gluten") == Answer.YES
    assert answer(knowledge, "brownies", "sesame") == Answer.NO


def test_a_dish_that_could_hold_anything_is_unknown_for_every_kind(knowledge: FoodKnowledge) -> None:
    for kind in ("sesame", "pork", "milk"):
        verdict = knowledge.contains("potluck_stew", kind)
        assert verdict.answer == Answer.UNKNOWN, kind
    assert "could hold anything" in knowledge.contains("stew", "sesame").source


def test_a_word_nothing_places_makes_the_answer_unknown(knowledge: FoodKnowledge) -> None:
    """An unlisted word may be an ingredient: "nduja flatbread" is not known pork-free."""
    verdict = knowledge.contains("nduja_flatbread", "pork")
    assert verdict.answer == Answer.UNKNOWN and "nduja" in verdict.source
    assert answer(knowledge, "warm_flatbread", "pork") == Answer.NO  # a word that describes, not an ingredient
    assert answer(knowledge, "zorbly", "sesame") == Answer.UNKNOWN


def test_kinds_imply_broader_ones_and_a_broad_food_leaves_a_narrow_kind_open(knowledge: FoodKnowledge) -> None:
    assert answer(knowledge, "chorizo", "meat") == Answer.YES  # pork is meat
    assert answer(knowledge, "sausage", "pork") == Answer.UNKNOWN  # meat: which one?
    assert answer(knowledge, "sausage", "meat") == Answer.YES
    assert answer(knowledge, "milk", "lactose") == Answer.YES  # milk implies lactose


def test_the_name_and_the_entry_free_a_food_of_kinds(knowledge: FoodKnowledge) -> None:
    assert answer(knowledge, "lactose_free_milk", "lactose") == Answer.NO
    assert answer(knowledge, "lactose_free_milk", "milk") == Answer.YES  # still dairy
    assert answer(knowledge, "sesame_free_hummus", "sesame") == Answer.NO
    assert answer(knowledge, "gluten-free flatbread", "gluten") == Answer.NO
    assert answer(knowledge, "flatbread without gluten", "gluten") == Answer.NO
    assert answer(knowledge, "wheat_free_flatbread", "gluten") == Answer.YES  # a member of a kind frees no kind
    assert answer(knowledge, "dairy free brownie", "milk") == Answer.NO  # the kind's free_words
    assert answer(knowledge, "dairy_free_brownie", "lactose") == Answer.NO  # only milk implies lactose
    assert answer(knowledge, "vegan_sausage", "meat") == Answer.NO  # what the diet rules out
    assert answer(knowledge, "vegan_sausage", "pork") == Answer.NO  # and everything narrower
    assert answer(knowledge, "vegan_sausage", "gluten") == Answer.UNKNOWN  # not what veganism is about


def test_what_the_user_said_comes_first(knowledge: FoodKnowledge) -> None:
    said = [Confirmation("potluck_stew", "sesame", False, "ines")]
    verdict = knowledge.contains("potluck_stew", "sesame", said)
    assert verdict.answer == Answer.NO and verdict.source == "ines said potluck stew has no sesame"
    assert answer(knowledge, "potluck_stew", "pork") == Answer.UNKNOWN  # only what was said


def test_food_or_not(knowledge: FoodKnowledge) -> None:
    assert knowledge.is_food("hummus") is True
    assert knowledge.is_food("tea_towel") is False
    assert answer(knowledge, "jamón_flatbread", "gluten") == Answer.YES  # accents dropped
    assert knowledge.is_food("blue_laptop") is False  # a colour describes
    assert knowledge.is_food("hummus_plate") is False  # the last word names what it is
    assert knowledge.is_food("plate_of_hummus") is True
    assert knowledge.is_food("zorbly") is None
    assert knowledge.kinds_named("nuts") == {"tree_nuts", "peanuts"}
    assert knowledge.kinds_in("allergic to sesame and wheat") == {"sesame", "gluten"}


def test_a_kind_nobody_defined_is_refused_at_load(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kinds: {gluten: {}}\nfoods:\n  pesto: {is: [milk]}\n")
    with pytest.raises(ConfigError, match=r"foods.pesto: unknown kind\(s\) \['milk'\]"):
        load_food_knowledge(path)
    path.write_text("kinds: {pork: {implies: [meat]}}\nfoods: {}\n")
    with pytest.raises(ConfigError, match="implies names undefined"):
        load_food_knowledge(path)


def test_only_an_answer_about_an_object_is_read_as_one_not_a_preference() -> None:
    """ "porridge.milk: oat milk" says what the user likes in their porridge, not that the
    porridge holds milk; "potluck_stew.contains_sesame: no sesame" is an answer."""
    from carryon_planner.core.knowledge import confirmations_from

    knowledge = load_food_knowledge(CONFIG / "planner" / "food_knowledge.yaml")
    facts = [("porridge", "milk", "oat milk"), ("potluck_stew", "contains_sesame", "no sesame")]
    assert confirmations_from(facts, knowledge, "ines") == (Confirmation("potluck_stew", "sesame", False, "ines"),)


def test_a_dislike_of_fizzy_drinks_is_settled_by_the_knowledge() -> None:
    knowledge = load_food_knowledge(CONFIG / "planner" / "food_knowledge.yaml")
    assert knowledge.kinds_in("dislikes fizzy drinks") == {"carbonated"}
    for fizzy in ("shandy", "kombucha", "sparkling water", "cola", "prosecco"):
        assert answer(knowledge, fizzy, "carbonated") == Answer.YES, fizzy
    for still in ("coconut water", "water", "orange juice"):
        assert answer(knowledge, still, "carbonated") == Answer.NO, still
