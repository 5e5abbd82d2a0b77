"""Ask: plan one request and write what the plan remembers; nothing moves (planner_node's
Ask service; the Assist action is core/session.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from carryon_planner.core.memory_ops import Memory, apply_plan_memory
from carryon_planner.core.repair import PlanningOutcome
from carryon_planner.core.request_planner import RequestPlanner


@dataclass(frozen=True)
class AskAnswer:
    """Ask's answer: the plan's id, the planning outcome and notes (LLM rounds, memory
    writes, dispatch)."""

    plan_id: str
    outcome: PlanningOutcome
    notes: tuple[str, ...]


def ask(
    planner: RequestPlanner,
    memory: Memory,
    *,
    user_id: str,
    text: str,
    new_plan_id: Callable[[], str],
    plan_only: bool,
) -> AskAnswer:
    """Plan `text` for `user_id`. Unless `plan_only`, a valid plan's durable user facts and
    immediate scene updates are written; nothing moves. Raises ContextUnavailable (then no
    plan id is taken)."""
    context = memory.context(user_id)
    outcome = planner.plan(user_id, text, context)
    plan_id = new_plan_id()
    notes = [f"{len(outcome.attempts)} LLM round(s)", *(f"mended: {f}" for a in outcome.attempts for f in a.mended)]
    notes += [*outcome.notes, *outcome.left_out_lines()]
    if not outcome.refused and not plan_only:
        notes += apply_plan_memory(
            memory, user_id, outcome.plan, plan_id, guard=planner.fact_guard(context, text, "the plan")
        )
    if not outcome.refused:
        notes.append(
            "plan only: nothing dispatched"
            if plan_only
            else "not dispatched: Ask only plans (use the Assist action to carry it out)"
        )
    return AskAnswer(plan_id, outcome, tuple(notes))
