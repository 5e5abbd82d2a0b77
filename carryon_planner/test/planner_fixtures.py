"""Shared test helpers of the planner tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from carryon_bench.core.personalization_score import UserMemory, memory_context
from carryon_common.core.llm import ChatMessage, LlmClient, LlmError
from carryon_common.core.skills import SkillLibrary
from carryon_planner.core.knowledge import FoodKnowledge
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
