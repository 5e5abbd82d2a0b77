"""The one place where bringup's core types meet ROS messages (node status converts in
carryon_common.convert)."""

from __future__ import annotations

from carryon_interfaces.msg import PlanState, SubtaskState

_PLAN_STATES = {
    PlanState.STATE_PLANNING: "planning",
    PlanState.STATE_VALIDATING: "validating",
    PlanState.STATE_EXECUTING: "executing",
    PlanState.STATE_SUCCEEDED: "succeeded",
    PlanState.STATE_FAILED: "failed",
    PlanState.STATE_REFUSED: "refused",
    PlanState.STATE_CANCELLED: "cancelled",
}


def plan_state_name(state: int) -> str:
    return _PLAN_STATES.get(state, f"unknown({state})")


_SUBTASK_STATES = {
    SubtaskState.STATE_PENDING: "pending",
    SubtaskState.STATE_ACTIVE: "active",
    SubtaskState.STATE_RECOVERING: "recovering",
    SubtaskState.STATE_SUCCEEDED: "succeeded",
    SubtaskState.STATE_FAILED: "failed",
    SubtaskState.STATE_SKIPPED: "skipped",
    SubtaskState.STATE_CANCELLED: "cancelled",
}


def subtask_state_name(state: int) -> str:
    return _SUBTASK_STATES.get(state, f"unknown({state})")
