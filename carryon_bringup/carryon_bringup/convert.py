"""The one place where bringup's core types meet ROS messages (node status converts in
carryon_common.convert)."""

from __future__ import annotations

from carryon_interfaces.msg import PlanState

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
