"""The repair loop with a scripted LLM: repair success, exhaustion -> safe refusal, and a
broken LLM -> safe refusal. Never an invalid plan."""

from __future__ import annotations

import json

from planner_fixtures import ScriptedLlm

from carryon_common.core.llm import ChatMessage
from carryon_planner.core.context import Endpoint, LibraryEntry, build_messages
from carryon_planner.core.repair import SAFE_REFUSAL_REPLY, plan_with_repair
from carryon_planner.core.validator import PlanningFacts, Validator

FACTS = PlanningFacts(
    request="Put the carrot in the bowl",
    instructions=("put the carrot in the bowl",),
    objects=frozenset({"carrot", "bowl"}),
    locations=frozenset({"kitchen_counter"}),
    # Scene memory holds the bowl on the counter and says nothing of the carrot (nowhere it
    # holds nothing is left to search: search_before_act; none to observe: observe_before_act).
    whereabouts={"bowl": "kitchen_counter"},
)
VALID = json.dumps({
    "reply": "Putting the carrot in the bowl.",
    "subtasks": [{"id": "s1", "kind": "vla", "objective": "carrot in bowl", "instruction": "put the carrot in the bowl",
                  "target": "carrot", "destination": "bowl"}],
})  # fmt: skip
PARAPHRASED = VALID.replace('"instruction": "put the carrot in the bowl"', '"instruction": "place carrot into bowl"')


def messages() -> list[ChatMessage]:
    return build_messages(
        request=FACTS.request, user_id="alice", memory="# User memory: alice\n## diet\n- preference: vegetarian",
        endpoints=[Endpoint("kitchen_counter", "where food is kept")],
        library=[LibraryEntry("put the carrot in the bowl", "pick up the carrot and put it into the bowl")],
    )  # fmt: skip


def test_a_failed_check_is_repaired_with_the_reasons_handed_back() -> None:
    llm = ScriptedLlm(["not json at all", PARAPHRASED, VALID])
    outcome = plan_with_repair(llm, messages(), FACTS, max_repairs=2, validator=Validator())
    assert not outcome.refused and outcome.repairs == 2
    assert outcome.plan.subtasks[0].instruction == "put the carrot in the bowl"
    feedback = llm.seen[2][-1].content
    assert llm.seen[2][-1].role == "user" and "instruction_in_library" in feedback and "did you mean" in feedback
    assert "invalid JSON" in llm.seen[1][-1].content


def test_exhausted_repairs_end_in_a_safe_refusal() -> None:
    llm = ScriptedLlm([PARAPHRASED, PARAPHRASED])
    outcome = plan_with_repair(llm, messages(), FACTS, max_repairs=1, validator=Validator())
    assert outcome.refused and outcome.plan.subtasks == [] and outcome.plan.reply == SAFE_REFUSAL_REPLY
    assert "no valid plan after 1 repair round(s)" in (outcome.plan.refusal or "")


def test_an_unreachable_llm_is_a_safe_refusal() -> None:
    outcome = plan_with_repair(ScriptedLlm(["RAISE"]), messages(), FACTS, max_repairs=2, validator=Validator())
    assert outcome.refused and outcome.plan.subtasks == [] and "connection refused" in (outcome.plan.refusal or "")


def test_the_context_is_deterministic_and_carries_rules_memory_and_library() -> None:
    first, second = messages(), messages()
    assert first == second
    system, user = first
    assert "VERBATIM" in system.content and '"title":"Plan"' in system.content
    assert "- preference: vegetarian" in user.content and '- "put the carrot in the bowl"' in user.content
    assert user.content.rstrip().endswith("Put the carrot in the bowl")
