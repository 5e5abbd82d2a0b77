"""The summariser over real HTTP against the stub server: lasting facts are stored; repeats,
one-off wishes and other users' facts are left out with the reason; a bad answer or an
unreachable LLM stores nothing."""

from __future__ import annotations

import json

from carryon_common.core.openai_client import OpenAiClient
from carryon_planner.core.plan import parse_plan
from carryon_planner.core.summarise import summarise
from carryon_sim.harness.fakes.openai_server import StubReply, StubVlmServer

PLAN = parse_plan(json.dumps({
    "reply": "Noted: tea from now on. Today I will bring you water.",
    "memory_operations": [
        {"op": "update_user", "entity": "drink", "key": "preference", "value": "tea", "durable": True},
        {"op": "update_user", "entity": "drink", "key": "today", "value": "water", "durable": False},
    ],
}))  # fmt: skip
STORED = [("diet", "preference", "vegetarian"), ("drink", "preference", "coffee")]


def run(*replies: str | StubReply):  # type: ignore[no-untyped-def]
    with StubVlmServer(list(replies)) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        outcome = summarise(llm, user_id="gina", request="I've switched to tea for good. Water today, please.",
                            plan=PLAN, stored=STORED, other_users=["gina", "bob"])  # fmt: skip
        prompt = "\n".join(stub.requests[0].texts()) if stub.requests else ""
    return outcome, prompt


def test_lasting_facts_are_stored_and_the_rest_left_out_with_reasons() -> None:
    answer = {"remember": [
        {"entity": "drink", "key": "preference", "value": "tea"},
        {"entity": "diet", "key": "preference", "value": "vegetarian"},
        {"entity": "drink", "key": "today", "value": "water"},
        {"entity": "friends", "key": "bob", "value": "likes ham"},
    ]}  # fmt: skip
    outcome, prompt = run(json.dumps(answer))
    assert outcome.problem == ""
    assert [(op.entity, op.key, op.value, op.durable) for op in outcome.store] == [("drink", "preference", "tea", True)]
    assert outcome.skipped == (
        "diet/preference: already stored",
        "drink/today: the plan marked it a one-off wish",
        "friends/bob: names another user (bob)",
    )
    assert "drink / preference: coffee" in prompt and "this request only" in prompt and "Never store" in prompt


def test_a_bad_answer_or_no_llm_stores_nothing() -> None:
    outcome, _ = run("not json")
    assert outcome.store == () and outcome.problem.startswith("malformed summary")
    outcome, _ = run(json.dumps({"remember": [{"entity": "drink", "key": "", "value": "tea"}]}))
    assert outcome.store == () and "remember.0.key" in outcome.problem
    outcome, _ = run(StubReply(status=500))
    assert outcome.store == () and outcome.problem.startswith("summariser unavailable")
    outcome, _ = run(json.dumps({"remember": [], "reason": "nothing lasting"}))
    assert outcome.store == () and outcome.skipped == () and outcome.problem == ""


def test_another_users_value_or_name_is_not_remembered_unless_said_here() -> None:
    answer = {"remember": [
        {"entity": "bob_diet", "key": "preference", "value": "meat"},
        {"entity": "bread", "key": "preference", "value": "white"},  # bob's value, not said by gina
        {"entity": "drink", "key": "preference", "value": "tea"},  # gina said it (and bob has it too)
    ]}  # fmt: skip
    with StubVlmServer([json.dumps(answer)]) as stub:
        llm = OpenAiClient(base_url=stub.base_url, model="stub", api_key="x", timeout_s=5.0, attempts=1)
        outcome = summarise(llm, user_id="gina", request="I've switched to tea for good.", plan=PLAN, stored=(),
                            other_users=["bob"], foreign_values=["white", "tea"])  # fmt: skip
    assert [op.value for op in outcome.store] == ["tea"]
    assert outcome.skipped == (
        "bob_diet/preference: names another user (bob)",
        "bread/preference: another user's value, not said in this exchange",
    )
