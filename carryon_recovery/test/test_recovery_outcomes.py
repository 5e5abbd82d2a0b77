"""An attempt is written with whether the task was completed, once its subtask ends
(core/outcomes.py): reflection reviews only attempts known to have failed."""

from __future__ import annotations

from carryon_recovery.core.outcomes import PendingAttempts, PlanView
from carryon_recovery.core.reflection import Attempt, failed_attempts


def attempt(attempt_id: str) -> Attempt:
    return Attempt(attempt_id=attempt_id, skill="regrasp", version=1, instruction="put the carrot in the bowl",
                   target="carrot", outcome="resumed", task_completed=None, operations=[])  # fmt: skip


def executing(plan_id: str, **subtasks: str) -> PlanView:
    return PlanView(plan_id, "executing", subtasks)


def test_an_attempt_waits_for_its_subtask_and_carries_how_it_ended() -> None:
    pending = PendingAttempts()
    pending.update(executing("p1", s1="succeeded", s4="recovering"))
    assert pending.add(attempt("s4-1"), "s4") == []  # held: the resumed instruction is still running
    assert pending.update(executing("p1", s1="succeeded", s4="active")) == []
    [done] = pending.update(executing("p1", s1="succeeded", s4="succeeded"))
    assert done.attempt_id == "s4-1" and done.task_completed is True and done.after_resume == ""
    assert pending.held == {}

    pending.add(attempt("s4-2"), "s4")  # the same subtask id, still executing in p1: held
    why = "carrot not in any container, not yet released inside bowl"
    [failed] = pending.update(PlanView("p1", "executing", {"s4": "failed"}, {"s4": why}))
    assert failed.task_completed is False and failed.after_resume == why  # what happened after the hand-back


def test_a_second_recovery_of_the_subtask_means_the_first_did_not_complete_it() -> None:
    pending = PendingAttempts()
    pending.update(executing("p1", s4="recovering"))
    assert pending.add(attempt("s4-1"), "s4") == []
    [first] = pending.add(attempt("s4-2"), "s4", "carrot held by the gripper")  # judged failed again
    assert first.attempt_id == "s4-1" and first.task_completed is False
    assert first.after_resume == "carrot held by the gripper"  # the reason the second goal gave
    [second] = pending.update(executing("p1", s4="succeeded"))
    assert second.attempt_id == "s4-2" and second.task_completed is True


def test_a_plan_that_ends_or_is_replaced_first_means_not_completed() -> None:
    pending = PendingAttempts()
    pending.update(executing("p1", s2="recovering"))
    pending.add(attempt("s2-1"), "s2")
    [ended] = pending.update(PlanView("p1", "cancelled", {"s2": "recovering"}, {"s2": "recovering: regrasp"}))
    assert ended.task_completed is False and ended.after_resume == ""  # no verdict after the hand-back
    pending.update(executing("p1", s2="recovering"))
    pending.add(attempt("s2-2"), "s2")
    [replaced] = pending.update(executing("p2", s1="pending"))
    assert replaced.task_completed is False


def test_outside_a_plan_or_at_shutdown_the_outcome_is_unknown() -> None:
    pending = PendingAttempts()
    [alone] = pending.add(attempt("s1-1"), "s1")  # an operator's goal: no plan executes s1
    assert alone.task_completed is None
    pending.update(PlanView("p1", "succeeded", {"s1": "succeeded"}))  # a finished plan holds nothing
    assert pending.add(attempt("s1-2"), "s1")[0].task_completed is None
    pending.update(executing("p2", s3="recovering"))
    pending.add(attempt("s3-1"), "s3")
    [flushed] = pending.flush()
    assert flushed.task_completed is None and pending.held == {}


def test_reflection_reviews_known_failures_only() -> None:
    attempts = [attempt("a").model_copy(update={"task_completed": c}) for c in (True, None, False)]
    assert [a.task_completed for a in failed_attempts(attempts, "regrasp")] == [False]
