"""The summariser (paper §B.2): after a plan finishes, keep what will matter next time.

An LLM reads the exchange (request, reply, the memory operations the plan made) and the
user's current facts, and answers which lasting facts to store (`remember`). One-off
wishes ("today I'd like tea") are not stored. The answer is checked before anything is
written. A fact must be a `- key: value` line under an entity, bounded in size, new (not
already stored with the same value), not a wish the plan itself marked one-off
(update_user with durable=false), and must not name another user. A malformed answer
or an unavailable LLM stores nothing and says why.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from carryon_common.core.llm import ChatMessage, LlmClient, LlmError
from carryon_planner.core.plan import Name, Plan, UpdateUser
from carryon_planner.core.requests import users_named

MAX_FACTS = 8

RULES = """You keep a robot assistant's long-term memory of ONE user. From the exchange below,
list the facts worth remembering for future requests, as JSON following the schema.

Rules:
1. Store lasting preferences, habits and facts the USER stated or confirmed ("I'm
   vegetarian", "I always take tea", "my mug is the blue one").
2. Do not store one-off wishes for this request only ("today", "this time", "right now"),
   what the robot did, or anything you guess.
3. Never store anything about another person.
4. Do not repeat a fact that is already stored with the same value; a changed value
   replaces the old one under the same entity and key.
5. When nothing lasting was said, answer with an empty list.
"""


class Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    entity: Name = Field(min_length=1)
    key: Name = Field(min_length=1)
    value: str = Field(min_length=1, max_length=200)


class Summary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    remember: list[Fact] = Field(default_factory=list, max_length=MAX_FACTS)
    reason: str = Field("", max_length=400)


@dataclass(frozen=True)
class SummaryOutcome:
    """`store`: durable update_user operations to apply (validated); `skipped`: facts left
    out and why; `problem`: why nothing could be stored ("" when the answer was usable)."""

    store: tuple[UpdateUser, ...]
    skipped: tuple[str, ...]
    problem: str = ""


def build_messages(
    *, user_id: str, request: str, plan: Plan, stored: Sequence[tuple[str, str, str]]
) -> list[ChatMessage]:
    """`stored`: the user's current facts as (entity, key, value)."""
    schema = json.dumps(Summary.model_json_schema(), sort_keys=True, separators=(",", ":"))
    lines = [f"User: {user_id}", "## Stored facts"]
    lines += [f"- {e} / {k}: {v}" for e, k, v in stored] or ["(none)"]
    lines += ["", "## Exchange", f"User: {request}", f"Assistant: {plan.reply}"]
    ops = [op for op in plan.memory_operations if isinstance(op, UpdateUser)]
    if ops:
        lines.append("Memory operations the plan made:")
        lines += [
            f"- {op.entity} / {op.key}: {op.value} ({'lasting' if op.durable else 'this request only'})" for op in ops
        ]
    return [ChatMessage("system", f"{RULES}\nSchema:\n{schema}\n"), ChatMessage("user", "\n".join(lines))]


def summarise(
    llm: LlmClient,
    *,
    user_id: str,
    request: str,
    plan: Plan,
    stored: Sequence[tuple[str, str, str]],
    other_users: Iterable[str] = (),
    foreign_values: Iterable[str] = (),
) -> SummaryOutcome:
    """Ask the LLM which lasting facts the exchange adds, and check its answer.
    `other_users`: the other users' ids (a fact naming one is left out); `foreign_values`:
    values only other users hold (left out unless this request says them)."""
    try:
        reply = llm.complete(
            build_messages(user_id=user_id, request=request, plan=plan, stored=stored), Summary.model_json_schema()
        )
    except LlmError as exc:
        return SummaryOutcome((), (), f"summariser unavailable: {exc}")
    try:
        summary = Summary.model_validate_json(reply.strip().removeprefix("```json").strip("`"))
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'reply'}: {e['msg']}" for e in exc.errors())
        return SummaryOutcome((), (), f"malformed summary: {problems}")
    current = {(e.lower(), k.lower()): v for e, k, v in stored}
    wishes = {
        (op.entity.lower(), op.key.lower(), op.value.lower())
        for op in plan.memory_operations
        if isinstance(op, UpdateUser) and not op.durable
    }
    others = [u.lower() for u in other_users if u and u.lower() != user_id.lower()]
    said = f"{request} {plan.reply}".lower()
    foreign = {v.lower() for v in foreign_values if len(v) >= 3 and v.lower() not in said}
    store: list[UpdateUser] = []
    skipped: list[str] = []
    for fact in summary.remember:
        text = f"{fact.entity} {fact.key} {fact.value}".lower()
        named = users_named(text, others)
        if named:
            skipped.append(f"{fact.entity}/{fact.key}: names another user ({', '.join(named)})")
        elif fact.value.lower() in foreign:
            skipped.append(f"{fact.entity}/{fact.key}: another user's value, not said in this exchange")
        elif (fact.entity.lower(), fact.key.lower(), fact.value.lower()) in wishes:
            skipped.append(f"{fact.entity}/{fact.key}: the plan marked it a one-off wish")
        elif current.get((fact.entity.lower(), fact.key.lower())) == fact.value:
            skipped.append(f"{fact.entity}/{fact.key}: already stored")
        else:
            store.append(UpdateUser(op="update_user", entity=fact.entity, key=fact.key, value=fact.value, durable=True))
    return SummaryOutcome(tuple(store), tuple(skipped))
