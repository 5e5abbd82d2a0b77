"""Subtasks as plain data (the plan schema proper arrives with issue #8)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class SubtaskKind(enum.StrEnum):
    """Mirrors Subtask.KIND_*."""

    VLA = "vla"
    OBSERVE = "observe"
    SAY = "say"
    CONTROL = "control"


@dataclass(frozen=True)
class SubtaskSpec:
    """One subtask of a plan; names refer to scene memory and the skill library."""

    id: str
    kind: SubtaskKind
    objective: str = ""
    instruction: str = ""
    target: str = ""
    source: str = ""
    destination: str = ""
    depends_on: tuple[str, ...] = ()
    condition: str = ""
