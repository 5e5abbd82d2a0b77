"""The one place where recovery core types meet ROS messages."""

from __future__ import annotations

from carryon_interfaces.action import Recover
from carryon_interfaces.msg import PlanState, SubtaskState
from carryon_recovery.core.outcomes import PlanView
from carryon_recovery.core.types import RecoveryResult


def _state_names(msg_type: type) -> dict[int, str]:
    return {getattr(msg_type, n): n.removeprefix("STATE_").lower() for n in dir(msg_type) if n.startswith("STATE_")}


_PLAN_STATES = _state_names(PlanState)
_SUBTASK_STATES = _state_names(SubtaskState)


def plan_view(msg: PlanState) -> PlanView:
    """What recovery needs of a plan state: its id, state and each subtask's state, by name."""
    return PlanView(
        msg.plan_id,
        _PLAN_STATES.get(msg.state, "unknown"),
        {s.subtask.id: _SUBTASK_STATES.get(s.state, "unknown") for s in msg.subtasks},
    )


def result_to_msg(result: RecoveryResult, msg: Recover.Result) -> Recover.Result:
    """Fill a Recover result message in place and return it."""
    msg.outcome = int(result.outcome)
    msg.message = result.message
    msg.steps = result.steps
    msg.skill = result.skill
    msg.version = result.version
    return msg
