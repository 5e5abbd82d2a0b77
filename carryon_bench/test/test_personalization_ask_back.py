"""The ask-back holds on every generalization case (the ask-back itself:
carryon_planner/test/test_planner_ask_back.py): whatever the model plans, nothing a user's
diet, allergy or wish rules out is dispatched, nor anything the planner must ask about first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from carryon_bench.core.personalization_score import forbidden_dispatches, load_suites, run_case
from carryon_common.core.openai_client import OpenAiClient
from carryon_planner.core.facts import load_preference_rules
from carryon_planner.core.knowledge import load_food_knowledge
from carryon_sim.harness.fakes.openai_server import StubVlmServer

CONFIG = Path(__file__).resolve().parents[2] / "config"
RULES = load_preference_rules(CONFIG / "planner" / "preferences.yaml")
KNOWLEDGE = load_food_knowledge(CONFIG / "planner" / "food_knowledge.yaml")
GENERAL = load_suites(CONFIG / "planner" / "generalization")


def plan(subtasks: list[dict[str, Any]]) -> str:
    return json.dumps({"reply": "Here you are.", "subtasks": subtasks, "memory_operations": []})


def serve(instruction: str, target: str, i: int = 1) -> dict[str, Any]:
    return {"id": f"s{i}", "kind": "vla", "objective": instruction, "instruction": instruction, "target": target}


CASES = [(suite, case) for suite in GENERAL for case in suite.cases if case.expect.forbid or case.expect.ask]


@pytest.mark.parametrize("suite,case", CASES, ids=[f"{s.name}/{c.id}" for s, c in CASES])
def test_a_model_that_proposes_everything_dispatches_nothing_forbidden(suite, case) -> None:  # type: ignore[no-untyped-def]
    """Whatever the model plans, the knowledge and the ask-back hold: a scripted model that
    proposes every instruction of the suite's library (the forbidden ones among them) gets
    none of the case's forbidden objects dispatched, and nothing it must ask about first."""
    everything = [serve(s.instruction, s.objects[0] if s.objects else "", i) for i, s in enumerate(suite.library, 1)]
    with StubVlmServer([plan(everything)]) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        result = run_case(llm, suite, case, preference_rules=RULES, max_repairs=0, knowledge=KNOWLEDGE)
    assert forbidden_dispatches(result.dispatched, case.expect) == [], result.mended
    for asked in case.expect.ask:
        spoken = asked.replace("_", " ")
        assert not [d for d in result.dispatched if f" {spoken} " in f" {d.split(':', 1)[1]} "], (asked, result.mended)
