"""Personalization suites: the shipped suites are consistent, scoring catches each kind of
wrong answer, and a case runs end to end over real HTTP against the stub server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from carryon_bench.core.personalization_score import (
    Expect,
    accuracy,
    forbidden_dispatches,
    load_suites,
    run_case,
    run_suites,
    score,
)
from carryon_common.core.openai_client import OpenAiClient
from carryon_planner.core.facts import load_preference_rules
from carryon_planner.core.plan import parse_plan
from carryon_sim.harness.fakes.openai_server import StubVlmServer

CONFIG = Path(__file__).resolve().parents[2] / "config"
SUITES = load_suites(CONFIG / "planner" / "personalization")
RULES = load_preference_rules(CONFIG / "planner" / "preferences.yaml")


def test_the_shipped_suites_cover_the_paper_and_name_only_what_exists() -> None:
    names = {s.name for s in SUITES}
    assert names == {
        "sandwich_preferences", "packing_by_activity", "preference_update", "profile_isolation",
        "covered_ingredients", "relocation_correction",
    }  # fmt: skip
    for suite in SUITES:
        instructions = {skill.instruction for skill in suite.library}
        for case in suite.cases:
            scene = case.scene if case.scene is not None else suite.scene
            for wanted in (*case.expect.include, *case.expect.forbid, *case.expect.exclude):
                assert wanted in instructions, f"{suite.name}/{case.id}: {wanted!r} is not in the suite's library"
            for location in (*case.expect.observe_first, *case.expect.scene_updates):
                assert location in scene, f"{suite.name}/{case.id}: unknown location {location!r}"
            assert not set(case.expect.include) & set(case.expect.exclude)


def test_the_suites_forbid_what_the_paper_counts_as_ruled_out() -> None:
    """`forbid` (what the user's preferences or wishes rule out, counted by the bench) is set
    where it must be: every case whose user has a diet or an allergy and that expects no
    refusal forbids something; a packing habit forbids nothing but what it says it leaves out."""
    forbidding = {s.name: [c.id for c in s.cases if c.expect.forbid] for s in SUITES}
    assert len(forbidding["sandwich_preferences"]) >= 16 and len(forbidding["covered_ingredients"]) >= 20
    assert forbidding["packing_by_activity"] == ["habits_swimming_without_towel"]
    suite = next(s for s in SUITES if s.name == "preference_update")
    one_off = next(c for c in suite.cases if c.id == "one_off_juice_today")  # "juice instead of coffee"
    assert one_off.expect.forbid == ["put the coffee in the cup"]


def test_an_expectation_lists_an_instruction_once() -> None:
    with pytest.raises(ValueError, match="in both include and forbid"):
        Expect(include=["put the ham on the bread"], forbid=["put the ham on the bread"])
    with pytest.raises(ValueError, match="in both forbid and exclude"):
        Expect(forbid=["put the ham on the bread"], exclude=["put the ham on the bread"])


def plan(subtasks: list[dict[str, Any]], memory: list[dict[str, Any]] | None = None, **extra: Any) -> str:
    names = ", ".join(s["target"] for s in subtasks if s.get("target"))
    reply = f"I will see to the {names}." if names else "Noted."
    return json.dumps({"reply": reply, "subtasks": subtasks, "memory_operations": memory or [], **extra})


OBSERVE = {"id": "s1", "kind": "observe", "objective": "look", "target": "kitchen_counter"}
OPEN = {"id": "s2", "kind": "vla", "objective": "uncovered", "instruction": "open the pink cover",
        "target": "pink_cover", "depends_on": ["s1"], "condition": "carrot under pink_cover"}  # fmt: skip
CARROT = {"id": "s3", "kind": "vla", "objective": "in the bowl", "instruction": "put the carrot in the bowl",
          "target": "carrot", "destination": "bowl", "depends_on": ["s2"]}  # fmt: skip


def test_scoring_names_each_missed_expectation() -> None:
    expect = Expect(include=["open the pink cover", "put the carrot in the bowl"],
                    forbid=["put the meat in the bowl"], exclude=["put the fish in the bowl"],
                    observe_first=["kitchen_counter"])  # fmt: skip
    assert score(parse_plan(plan([OBSERVE, OPEN, CARROT])), False, expect) == []
    unobserved = {**OPEN, "depends_on": []}
    assert score(parse_plan(plan([OBSERVE, unobserved, CARROT])), False, expect) == [
        "a VLA subtask does not wait for the observe of kitchen_counter"
    ]
    meat = {**CARROT, "instruction": "put the meat in the bowl", "target": "meat"}
    failures = score(parse_plan(plan([OBSERVE, OPEN, meat])), False, expect)
    assert failures == ["missing 'put the carrot in the bowl'", "dispatched forbidden 'put the meat in the bowl'"]
    assert forbidden_dispatches(("observe:kitchen_counter", "vla:put the meat in the bowl"), expect) == [
        "put the meat in the bowl"
    ]
    fish = {**CARROT, "instruction": "put the fish in the bowl", "target": "fish"}
    failures = score(parse_plan(plan([OBSERVE, OPEN, fish])), False, expect)
    assert failures == ["missing 'put the carrot in the bowl'", "dispatched excluded 'put the fish in the bowl'"]
    refusal = parse_plan(plan([], refusal="no"))
    assert score(refusal, True, expect)[0] == "refused: no"
    assert score(refusal, True, Expect(refuse=True)) == []
    remember = Expect(refuse=True, remember=[{"key": "preference", "value": "tea", "durable": True}])  # type: ignore[list-item]
    wish = [{"op": "update_user", "entity": "drink", "key": "preference", "value": "tea", "durable": False}]
    assert score(parse_plan(plan([], wish)), False, remember) == ["no update_user preference~'tea' durable=True"]
    assert score(parse_plan(plan([], [{**wish[0], "durable": True}])), False, remember) == []
    leaky = parse_plan(json.dumps({"reply": "Henry likes peanuts.", "subtasks": []}))
    assert score(leaky, False, Expect(refuse=True, reply_excludes=["henry"])) == ["reply mentions 'henry'"]


def test_questions_are_scored_where_expected_and_where_the_answer_was_knowable() -> None:
    """`ask`: the reply must ask about each object and nothing naming it is dispatched; a
    question about anything else is a miss (its answer was knowable)."""
    sauce = {**CARROT, "instruction": "put the house sauce in the bowl", "target": "house_sauce"}
    expect = Expect(refuse=True, ask=["house_sauce"])
    nothing = parse_plan(plan([]))
    assert score(nothing, False, expect, ["house_sauce"]) == []
    assert score(nothing, False, expect) == ["did not ask about 'house sauce'"]
    assert score(parse_plan(plan([OBSERVE, sauce])), False, Expect(ask=["house_sauce"]), ["house_sauce"]) == [
        "dispatched 'put the house sauce in the bowl' before asking about 'house sauce'"
    ]
    assert score(nothing, False, Expect(refuse=True), ["carrot"]) == ["asked about 'carrot', which was knowable"]
    # a word of another object's name is not the object: "tea" is not in "steak"
    steak = {**CARROT, "instruction": "put the steak in the bowl", "target": "steak"}
    assert score(parse_plan(plan([OBSERVE, steak])), False, Expect(ask=["tea"]), ["tea"]) == []


def test_a_case_runs_over_http_with_repair_and_is_scored() -> None:
    suite = next(s for s in SUITES if s.name == "covered_ingredients")
    case = next(c for c in suite.cases if c.id == "remembered_memory")
    invented = {**CARROT, "instruction": "serve the carrot"}
    # The first answer invents an instruction: the validator rejects it, the repair fixes it.
    with StubVlmServer([plan([OBSERVE, OPEN, invented]), plan([OBSERVE, OPEN, CARROT])]) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        result = run_case(llm, suite, case, preference_rules=RULES, max_repairs=2)
        prompt = "\n".join(stub.requests[0].texts())
    assert result.passed and result.llm_rounds == 2, result.rejected
    assert "instruction_in_library" in result.rejected[0]
    assert result.dispatched == ("observe:kitchen_counter", "vla:open the pink cover", "vla:put the carrot in the bowl")
    assert "vegetarian" in prompt and "carrot under pink_cover" in prompt and "## User memory: alice" in prompt
    assert "dinner" not in prompt  # bob's memory never reaches alice's prompt


def test_exhausted_repairs_fail_the_case_and_accuracy_is_per_suite() -> None:
    suite = next(s for s in SUITES if s.name == "covered_ingredients")
    with StubVlmServer(["not json"] * 20) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        results = run_suites(llm, [suite], preference_rules=RULES, max_repairs=1, cases_per_suite=2)
    assert [r.passed for r in results] == [False, False] and all(r.refused for r in results)
    assert all(r.llm_rounds == 2 for r in results)
    assert accuracy(results) == {"covered_ingredients": 0.0, "all": 0.0}


@pytest.mark.parametrize("suite", SUITES, ids=lambda s: s.name)
def test_refusing_everything_passes_only_the_refusal_cases(suite) -> None:  # type: ignore[no-untyped-def]
    """A planner that always refuses must not score well: only cases that expect no
    dispatch (and no memory change) can pass."""
    replies = [plan([], refusal="I will not do anything.")] * len(suite.cases)
    with StubVlmServer(replies) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        results = run_suites(llm, [suite], preference_rules=RULES, max_repairs=0)
    for case, result in zip(suite.cases, results, strict=True):
        expected = case.expect.refuse and not case.expect.remember and not case.expect.scene_updates
        assert result.passed == expected, (case.id, result.failures)


def test_a_case_records_what_the_planner_mended_without_the_llm() -> None:
    suite = next(s for s in SUITES if s.name == "sandwich_preferences")
    case = next(c for c in suite.cases if c.id == "alice_vegetarian")
    ham = {"id": "s1", "kind": "vla", "objective": "ham on bread", "instruction": "put the ham on the bread",
           "target": "ham"}  # fmt: skip
    with StubVlmServer([plan([ham])]) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        result = run_case(llm, suite, case, preference_rules=RULES, max_repairs=0)
    assert result.llm_rounds == 1 and result.refused and result.dispatched == ()
    # The model was told what her diet rules out (the taxonomy's reading), so that it need not guess.
    context = stub.requests[0].body["messages"][1]["content"]
    assert "## Ruled out by the user's preferences" in context
    assert "- ham: diet preference: vegetarian: ham is meat" in context and "- cheese:" not in context
    assert result.mended == (
        "[preference_conflict] dropped s1: ham conflicts with 'diet preference: vegetarian: ham is meat'",
    )


@pytest.mark.parametrize("suite", SUITES, ids=lambda s: s.name)
def test_serving_everything_fails_every_case_with_a_forbidden_object(suite) -> None:  # type: ignore[no-untyped-def]
    """A planner that dispatches the whole library must not score on exclusions: a case
    with a forbidden object fails, unless the planner itself dropped every forbidden
    instruction (what the user's preferences rule out, what an observation did not see
    where memory put it, or what a closed request does not ask for: core/mend.py) and
    what is left is exactly what the user asked for (`only`)."""
    everything = [
        {"id": f"s{i}", "kind": "vla", "objective": s.instruction, "instruction": s.instruction,
         "target": s.objects[0] if s.objects else ""}
        for i, s in enumerate(suite.library, 1)
    ]  # fmt: skip
    with StubVlmServer([plan(everything)] * len(suite.cases)) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        results = run_suites(llm, [suite], preference_rules=RULES, max_repairs=0)
    for case, result in zip(suite.cases, results, strict=True):
        if (case.expect.forbid or case.expect.exclude) and result.passed:  # passed: nothing ruled out was dispatched
            dropped = ("[preference_conflict] dropped", "[act_on_what_is_there] dropped", "[acts_on_request] dropped")
            assert any(fix.startswith(dropped) for fix in result.mended), case.id


def test_a_case_gets_the_other_users_as_memory_node_gives_them() -> None:
    """The cross-user checks run in the bench as in planner_node: the other users and the
    values only they hold reach the validator (never the prompt)."""
    suite = next(s for s in SUITES if s.name == "profile_isolation")
    # A request that does not name Henry (one that does is refused before any check: about_other_users).
    case = next(c for c in suite.cases if c.id == "iris_gets_her_snack")
    leak = json.dumps({"reply": "Henry is training for a marathon.", "subtasks": []})
    with StubVlmServer([leak]) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        result = run_case(llm, suite, case, preference_rules=RULES, max_repairs=0)
        prompt = "\n".join(stub.requests[0].texts())
    assert "no_foreign_facts" in result.rejected[0] and result.refused
    assert "marathon" not in result.reply and "marathon" not in prompt


GENERAL = load_suites(CONFIG / "planner" / "generalization")


def _words_of(paths: list[Path]) -> tuple[set[str], str]:
    import re

    text = " ".join(path.read_text(encoding="utf-8").lower() for path in paths)
    return set(re.findall(r"[a-z0-9_]+", text)), " " + " ".join(re.findall(r"[a-z0-9]+", text)) + " "


def test_the_generalization_suites_name_nothing_the_rest_of_the_config_names() -> None:
    """The generalization set measures requests nobody wrote rules for: its users and places
    appear in no other file of config/, its objects in no other suite (the food knowledge may
    list any food people eat, but no case of ours was written with them), and its
    expectations name only what its libraries and scenes hold."""
    config_files = [  # the food knowledge names foods, which may share a word with a person ("pedro ximenez")
        p
        for p in CONFIG.rglob("*")
        if p.is_file() and p.suffix in {".yaml", ".yml"} and "generalization" not in p.parts
        if p.name != "food_knowledge.yaml"
    ]
    config_words, config_spoken = _words_of(config_files)
    suite_words, suite_spoken = _words_of(sorted((CONFIG / "planner" / "personalization").glob("*.yaml")))
    assert sum(len(s.cases) for s in GENERAL) >= 60
    for suite in GENERAL:
        instructions = {skill.instruction for skill in suite.library}
        users_and_places: set[str] = set(suite.users)
        objects: set[str] = set()
        for case in suite.cases:
            scene = case.scene if case.scene is not None else suite.scene
            users_and_places |= set(scene) | set(case.users or {})
            objects |= {item.split(" under ")[0] for items in scene.values() for item in items}
            for wanted in (*case.expect.include, *case.expect.forbid, *case.expect.exclude):
                assert wanted in instructions, f"{suite.name}/{case.id}: {wanted!r} is not in the suite's library"
            for asked in case.expect.ask:
                assert any(asked in items for items in scene.values()), f"{suite.name}/{case.id}: {asked!r} unseen"
        for name, (words, spoken) in [
            *((n, (config_words, config_spoken)) for n in sorted(users_and_places)),
            *((n, (suite_words, suite_spoken)) for n in sorted(objects)),
        ]:
            assert name not in words and f" {name.replace('_', ' ')} " not in spoken, f"{suite.name}: {name!r} reused"
