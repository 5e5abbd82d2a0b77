"""The one place where planner core types meet ROS messages."""

from __future__ import annotations

from carryon_common.convert import subtask_to_msg
from carryon_interfaces.msg import Subtask as SubtaskMsg
from carryon_interfaces.msg import SubtaskState
from carryon_planner.core.plan import PlannedSubtask


def planned_subtask_to_msg(subtask: PlannedSubtask) -> SubtaskMsg:
    """A validated plan's subtask as the Subtask message the execution loop's nodes take."""
    return subtask_to_msg(subtask.as_subtask())


def planned_subtask_to_state(subtask: PlannedSubtask) -> SubtaskState:
    """A validated plan's subtask as a pending SubtaskState."""
    return SubtaskState(subtask=planned_subtask_to_msg(subtask), state=SubtaskState.STATE_PENDING)
