"""The one place where bringup's core types meet ROS messages (status, memory, plans)."""

from __future__ import annotations

from carryon_common.convert import msg_to_health  # re-exported: status conversion lives in common
from carryon_interfaces.msg import PlanState

__all__ = ["msg_to_health", "plan_state_name"]

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
