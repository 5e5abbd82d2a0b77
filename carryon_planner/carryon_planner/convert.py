"""The one place where planner core types meet ROS messages."""

from __future__ import annotations

from carryon_common.core.subtask import SubtaskKind
from carryon_interfaces.msg import Subtask, SubtaskState
from carryon_planner.core.plan import PlannedSubtask
from carryon_planner.core.types import SubtaskSpec


def subtask_to_msg(spec: SubtaskSpec) -> Subtask:
    return Subtask(
        id=spec.id,
        kind=spec.kind.value,
        objective=spec.objective,
        instruction=spec.instruction,
        target=spec.target,
        source=spec.source,
        destination=spec.destination,
        depends_on=list(spec.depends_on),
        condition=spec.condition,
    )


def subtask_from_msg(msg: Subtask) -> SubtaskSpec:
    """Raises ValueError for an unknown kind."""
    return SubtaskSpec(
        id=msg.id,
        kind=SubtaskKind(msg.kind),
        objective=msg.objective,
        instruction=msg.instruction,
        target=msg.target,
        source=msg.source,
        destination=msg.destination,
        depends_on=tuple(msg.depends_on),
        condition=msg.condition,
    )


def planned_subtask_to_msg(subtask: PlannedSubtask) -> Subtask:
    """A validated plan's subtask as the Subtask message the execution loop's nodes take."""
    fields = subtask.model_dump()
    return subtask_to_msg(SubtaskSpec(**{**fields, "kind": SubtaskKind(subtask.kind),
                                         "depends_on": tuple(subtask.depends_on)}))  # fmt: skip


def planned_subtask_to_state(subtask: PlannedSubtask) -> SubtaskState:
    """A validated plan's subtask as a pending SubtaskState."""
    return SubtaskState(subtask=planned_subtask_to_msg(subtask), state=SubtaskState.STATE_PENDING)
