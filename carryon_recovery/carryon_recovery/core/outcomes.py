"""Whether the task was completed after a recovery: known only later, when the executive
finishes the subtask (the judge's verdict on the resumed instruction), so each attempt
waits here for it before it is written for reflection.

recovery_node follows the planner's plan state: an attempt made while a plan executes its
subtask is held until that subtask ends (succeeded: `task_completed` true; failed, skipped
or cancelled: false) or the plan ends without it (false). An attempt outside a plan (an
operator's or a benchmark's Recover goal), or still held when the node stops, is written
with `task_completed` null: nobody knows, and reflection reviews only known failures.
A failed attempt also carries what the judge said after the hand-back (`after_resume`):
the next Recover goal's failure reason, or the failed subtask's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from carryon_recovery.core.reflection import Attempt

# Subtask states (carryon_interfaces/msg/SubtaskState) that end a subtask, and whether the
# task was completed then.
SUBTASK_ENDED = {"succeeded": True, "failed": False, "skipped": False, "cancelled": False}
PLAN_ENDED = ("succeeded", "failed", "refused", "cancelled")


@dataclass
class PlanView:
    """The latest plan state the node saw: its id, state, subtask states and messages by id."""

    plan_id: str = ""
    state: str = ""
    subtasks: Mapping[str, str] = field(default_factory=dict)
    messages: Mapping[str, str] = field(default_factory=dict)  # the judge's reason, when a subtask failed

    @property
    def executing(self) -> bool:
        return self.state == "executing"


@dataclass
class PendingAttempts:
    """Attempts waiting for their subtask's end, keyed by (plan id, subtask id)."""

    plan: PlanView = field(default_factory=PlanView)
    held: dict[tuple[str, str], list[Attempt]] = field(default_factory=dict)

    def add(self, attempt: Attempt, subtask_id: str, failure_reason: str = "") -> list[Attempt]:
        """The attempts to write now: this one with task_completed null when no executing
        plan holds its subtask, else it waits; an earlier attempt on the same subtask is
        written as not completed (the task failed again after it: `failure_reason`, the
        judge's reason that asked for this attempt)."""
        if self.plan.executing and subtask_id in self.plan.subtasks:
            key = (self.plan.plan_id, subtask_id)
            earlier = self.held.pop(key, [])
            self.held[key] = [attempt]
            again = {"task_completed": False, "after_resume": failure_reason}
            return [a.model_copy(update=again) for a in earlier]
        return [attempt.model_copy(update={"task_completed": None})]

    def update(self, plan: PlanView) -> list[Attempt]:
        """A new plan state: the held attempts whose subtask (or plan) ended, with the outcome."""
        self.plan = plan
        done: list[Attempt] = []
        for (plan_id, subtask_id), attempts in list(self.held.items()):
            state = plan.subtasks.get(subtask_id, "") if plan_id == plan.plan_id else ""
            if plan_id != plan.plan_id:  # another plan replaced it before the subtask ended
                completed = False
            elif state in SUBTASK_ENDED:
                completed = SUBTASK_ENDED[state]
            elif plan.state in PLAN_ENDED:
                completed = False
            else:
                continue
            failed = state in SUBTASK_ENDED and not completed  # its message says why
            after = plan.messages.get(subtask_id, "") if failed else ""
            done += [a.model_copy(update={"task_completed": completed, "after_resume": after}) for a in attempts]
            del self.held[(plan_id, subtask_id)]
        return done

    def flush(self) -> list[Attempt]:
        """Every held attempt, outcome unknown (the node stops)."""
        done = [a.model_copy(update={"task_completed": None}) for attempts in self.held.values() for a in attempts]
        self.held.clear()
        return done
