"""Shared test helpers of the planner tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from carryon_common.core.llm import ChatMessage, LlmClient, LlmError
from carryon_common.core.skills import SkillLibrary
from carryon_planner.core.knowledge import FoodKnowledge
from carryon_planner.core.memory_ops import MemoryContext, StoredFact
from carryon_planner.core.repair import PlanningOutcome
from carryon_planner.core.request_planner import RequestPlanner
from carryon_planner.core.taxonomy import Taxonomy


@dataclass
class ScriptedLlm:
    """An LlmClient answering with `replies` in order ("RAISE" = an unreachable LLM);
    records every conversation it was sent in `seen`."""

    replies: list[str]
    seen: list[list[ChatMessage]] = field(default_factory=list)
    name: str = "scripted"

    def complete(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> str:
        assert schema is not None and schema["title"] == "Plan"
        self.seen.append(list(messages))
        reply = self.replies.pop(0)
        if reply == "RAISE":
            raise LlmError("connection refused")
        return reply


UserMemory = dict[str, dict[str, str]]  # entity -> key -> value


def memory_context(user: str, users: Mapping[str, UserMemory], scene: Mapping[str, Sequence[str]]) -> MemoryContext:
    """What memory_node's GetContext gives the planner for `user`, from in-memory user and
    scene memory, rendered by memory's own code (a test may use a peer; planner code may not):
    the user's facts, scene memory, the other users and the values only they hold."""
    from carryon_memory.core.others import foreign_values
    from carryon_memory.core.render import render_context
    from carryon_memory.core.types import Fact, Location

    facts = [Fact(entity, key, value) for entity, keys in users.get(user, {}).items() for key, value in keys.items()]
    scene_items = {name: tuple(items) for name, items in scene.items()}
    others = tuple(sorted(u for u in users if u != user))
    theirs = (value for other in others for keys in users[other].values() for value in keys.values())
    return MemoryContext(
        rendered=render_context(
            user, facts, (), [Location(n, i) for n, i in scene_items.items()], known_user=user in users
        ),
        facts=tuple(StoredFact(f.entity, f.key, f.value) for f in facts),
        scene=scene_items,
        other_users=others,
        foreign_values=foreign_values((f.value for f in facts), theirs),
    )


def plan_request(
    llm: LlmClient,
    *,
    request: str,
    user: str,
    users: Mapping[str, UserMemory],
    scene: Mapping[str, Sequence[str]],
    library: SkillLibrary,
    preference_rules: Taxonomy,
    max_repairs: int,
    observations: Mapping[str, Sequence[str]] | None = None,
    knowledge: FoodKnowledge | None = None,
) -> PlanningOutcome:
    """Plan one request as planner_node plans an Ask from memory_node's context (the same
    RequestPlanner: rendering, context, validator, mending, repair)."""
    planner = RequestPlanner(llm, library, preference_rules, max_repairs, knowledge=knowledge)
    return planner.plan(user, request, memory_context(user, users, scene), observations)
