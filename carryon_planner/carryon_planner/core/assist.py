"""One request from plan to done (paper Fig. 1 / §3.1): plan, execute, and replan when an
observation contradicts scene memory.

    plan ──valid──▶ apply memory operations ──▶ Executive.run ──replan──▶ plan again with
      │                                              │                    the observations
      └─refused──▶ tell the user why                 └─done / failed──▶ result

The planner is injected (`plan(observations) -> outcome`) with `apply_memory(plan) -> scene
memory after the plan's memory operations` (what the executive compares observations
with), so the same
loop runs in planner_node (memory_node's context, the configured LLM) and in tests
(in-memory memory, a stub LLM). Replans are bounded by `max_replans`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from carryon_planner.core.executive import Dispatch, Executive, RunResult, SubtaskRecord
from carryon_planner.core.plan import Plan
from carryon_planner.core.repair import PlanningOutcome

Observations = Mapping[str, tuple[str, ...]]
Planner = Callable[[Observations], PlanningOutcome]
ApplyMemory = Callable[[Plan], Mapping[str, tuple[str, ...]]]


@dataclass(frozen=True)
class AssistRound:
    outcome: PlanningOutcome
    run: RunResult | None  # None when nothing was executed (refusal, reply only)


@dataclass(frozen=True)
class AssistResult:
    """succeeded: the last plan ran to the end (or needed no motion) and was not a refusal."""

    succeeded: bool
    refused: bool
    reply: str
    message: str
    rounds: tuple[AssistRound, ...]


def assist(
    plan: Planner,
    apply_memory: ApplyMemory,
    dispatch: Dispatch,
    *,
    max_replans: int = 2,
    on_change: Callable[[Sequence[SubtaskRecord]], None] = lambda _records: None,
    on_plan: Callable[[PlanningOutcome], None] = lambda _outcome: None,
    on_finished: Callable[[AssistResult], None] = lambda _result: None,
) -> AssistResult:
    """Plan, execute, replan on contradicting observations; `on_finished` gets the result.
    planner_node runs this loop inside an AssistSession (core/session.py), which adds the
    memory writes, the progress it publishes and the summariser."""
    result = _assist(plan, apply_memory, dispatch, max_replans=max_replans, on_change=on_change, on_plan=on_plan)
    on_finished(result)
    return result


def _assist(
    plan: Planner,
    apply_memory: ApplyMemory,
    dispatch: Dispatch,
    *,
    max_replans: int,
    on_change: Callable[[Sequence[SubtaskRecord]], None],
    on_plan: Callable[[PlanningOutcome], None],
) -> AssistResult:
    rounds: list[AssistRound] = []
    observations: Observations = {}
    for _ in range(max_replans + 1):
        outcome = plan(observations)
        on_plan(outcome)
        if outcome.refused:
            rounds.append(AssistRound(outcome, None))
            reason = outcome.plan.refusal or "refused"
            return AssistResult(False, True, outcome.plan.reply, f"refused: {reason}", tuple(rounds))
        scene = apply_memory(outcome.plan)
        if not outcome.plan.subtasks:
            rounds.append(AssistRound(outcome, None))
            return AssistResult(True, False, outcome.plan.reply, "answered, nothing to do", tuple(rounds))
        run = Executive(outcome.plan, dispatch, scene, on_change).run()
        rounds.append(AssistRound(outcome, run))
        if not run.replan:
            return AssistResult(run.succeeded, False, outcome.plan.reply, run.message, tuple(rounds))
        observations = dict(run.replan)
    last = rounds[-1].outcome.plan.reply
    return AssistResult(False, False, last, f"still replanning after {max_replans} replan(s): stopped", tuple(rounds))
