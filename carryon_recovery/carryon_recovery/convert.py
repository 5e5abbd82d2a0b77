"""The one place where recovery core types meet ROS messages."""

from __future__ import annotations

from carryon_common.convert import plan_state_name, subtask_state_name
from carryon_interfaces.action import Recover
from carryon_interfaces.msg import PlanState
from carryon_recovery.core.outcomes import PlanView
from carryon_recovery.core.types import RecoveryResult


def plan_view(msg: PlanState) -> PlanView:
    """What recovery needs of a plan state: its id, state, each subtask's state (by name) and message."""
    return PlanView(
        msg.plan_id,
        plan_state_name(msg.state),
        {s.subtask.id: subtask_state_name(s.state) for s in msg.subtasks},
        {s.subtask.id: s.message for s in msg.subtasks},
    )


def result_to_msg(result: RecoveryResult, msg: Recover.Result) -> Recover.Result:
    """Fill a Recover result message in place and return it."""
    msg.outcome = int(result.outcome)
    msg.message = result.message
    msg.steps = result.steps
    msg.skill = result.skill
    msg.version = result.version
    return msg
