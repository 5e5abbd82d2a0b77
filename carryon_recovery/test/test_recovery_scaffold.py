from __future__ import annotations

from carryon_interfaces.action import Recover
from carryon_recovery import convert
from carryon_recovery.core.types import Outcome, RecoveryResult


def test_result_fills_the_action_result() -> None:
    msg = convert.result_to_msg(RecoveryResult(Outcome.RESUME, "re-grasped", 57, "regrasp", 3), Recover.Result())
    assert msg.outcome == Recover.Result.OUTCOME_RESUME
    assert (msg.message, msg.steps, msg.skill, msg.version) == ("re-grasped", 57, "regrasp", 3)


def test_outcome_values_match_the_interface() -> None:
    assert Outcome.RESUME_UNVERIFIED == Recover.Result.OUTCOME_RESUME_UNVERIFIED
    assert Outcome.NOT_IMPLEMENTED == Recover.Result.OUTCOME_NOT_IMPLEMENTED
