"""Food knowledge with provenance (core/knowledge.py): yes / no / unknown, and from where."""

from __future__ import annotations

from pathlib import Path

import pytest

from carryon_common.core.errors import ConfigError
from carryon_planner.core.knowledge import Answer, Confirmation, FoodKnowledge, load_food_knowledge

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
  poultry: {aka: [chicken], implies: [meat]}
  fish: {}
  soy: {}
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
  gyoza: {is: [gluten, pork]}
  tofu: {is: [soy]}
  chicken: {is: [poultry]}
  fish chowder: {is: [fish, milk], may: ["*"]}
  leche de tigre: {is: [fish], note: the lime and fish marinade of a ceviche}
not_food: [plate, tea towel, laptop]
describing_words: [warm, blue, the, of]
vessels: [plate]
diets:
  vegan: [meat, fish, milk]
  vegetarian: [meat, fish]
substitutes:
  words: [tofu]
  in_place_of: [meat, fish]
names_that_mislead:
  leche de tigre: "'leche' is the marinade's colour, not milk"
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
    assert answer(knowledge, "flatbread_warms", "pork") == Answer.NO  # in any number
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
    from carryon_planner.core.answers import confirmations_from

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


def test_a_name_that_names_a_kind_must_hold_it_or_say_why_not(tmp_path: Path) -> None:
    """An entry's other name that names a kind ("seafood paella" under paella) must hold that
    kind for certain, or be listed as a name that misleads ("lamb's lettuce"): otherwise the
    file is refused, naming the entry, the name and the kind."""
    path = tmp_path / "bad.yaml"
    path.write_text(
        "kinds: {fish: {aka: [seafood]}, meat: {}}\nfoods:\n  paella: {may: [fish, meat], aka: [seafood paella]}\n"
    )
    with pytest.raises(ConfigError, match=r"foods.paella: 'seafood paella' names fish.*names_that_mislead"):
        load_food_knowledge(path)
    path.write_text(path.read_text() + "names_that_mislead: {seafood paella: test}\n")
    load_food_knowledge(path)
    knowledge = load_food_knowledge(CONFIG / "planner" / "food_knowledge.yaml")
    for name, kind in [("seafood paella", "crustaceans"), ("pork vindaloo", "pork"), ("prawn tempura", "crustaceans"),
                       ("almond croissant", "tree_nuts"), ("lamb tagine", "lamb"), ("milk stout", "milk"),
                       ("beef satay", "beef"), ("honey roast ham", "honey")]:  # fmt: skip
        assert answer(knowledge, name, kind) == Answer.YES, name
    for name, kind in [("lamb's lettuce", "lamb"), ("oyster mushroom", "molluscs"), ("oat milk latte", "milk"),
                       ("coconut meat", "meat"), ("kinder egg", "egg")]:  # fmt: skip
        assert answer(knowledge, name, kind) == Answer.NO, name


def test_a_plant_food_in_the_place_of_a_dishs_meat_frees_it_of_meat(knowledge: FoodKnowledge) -> None:
    """ "tofu gyoza": tofu where the gyoza's pork was; the rest of the recipe stays, and so
    does what the name itself calls meat ("tofu chicken") or what stands beside it."""
    assert answer(knowledge, "tofu_gyoza", "pork") == Answer.NO
    assert answer(knowledge, "tofu_gyoza", "meat") == Answer.NO
    assert answer(knowledge, "tofu_gyoza", "gluten") == Answer.YES  # the wrapper
    assert answer(knowledge, "tofu_gyoza", "soy") == Answer.YES  # the tofu
    assert "gyoza with tofu in place of its meat" in knowledge.contains("tofu gyoza", "gluten").source
    assert answer(knowledge, "tofu_chicken", "poultry") == Answer.YES  # the name says chicken
    assert answer(knowledge, "tofu_and_chorizo", "pork") == Answer.YES  # beside, not in place
    assert answer(knowledge, "tofu_stew", "meat") == Answer.UNKNOWN  # a stew could hold anything still
    assert answer(knowledge, "gyoza", "pork") == Answer.YES
    assert answer(knowledge, "leche de tigre", "milk") == Answer.NO


def test_the_curated_substitutes(tmp_path: Path) -> None:
    knowledge = load_food_knowledge(CONFIG / "planner" / "food_knowledge.yaml")
    for name in ("jackfruit carnitas", "vegetable gyoza", "seitan gyros", "tempeh bacon", "soy chorizo",
                 "quorn sausage roll", "tofu katsu curry"):  # fmt: skip
        assert answer(knowledge, name, "meat") == Answer.NO, name
    assert answer(knowledge, "seitan gyros", "gluten") == Answer.YES
    for name in ("vegetable beef soup", "chicken and tofu stir fry", "jackfruit pulled pork", "mushroom burger"):
        assert answer(knowledge, name, "meat") != Answer.NO, name
    path = tmp_path / "bad.yaml"
    path.write_text("kinds: {meat: {}}\nfoods: {tofu: {}}\nsubstitutes: {words: [tofu, zorbly], in_place_of: [meat]}\n")
    with pytest.raises(ConfigError, match=r"substitutes.words: 'zorbly' is no food"):
        load_food_knowledge(path)


def test_a_drink_holds_what_it_is_made_of_not_what_a_drinker_adds() -> None:
    knowledge = load_food_knowledge(CONFIG / "planner" / "food_knowledge.yaml")
    for drink in ("coffee", "tea", "black coffee", "americano"):
        assert answer(knowledge, drink, "milk") == Answer.NO, drink
    for drink in ("latte", "masala chai", "flat white"):
        assert answer(knowledge, drink, "milk") == Answer.YES, drink
    assert answer(knowledge, "cup of tea", "milk") == Answer.UNKNOWN  # as the drinker takes it
