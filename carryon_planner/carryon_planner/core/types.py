"""Subtasks as plain data (the plan schema proper is core/plan.py)."""

from __future__ import annotations

from dataclasses import dataclass

from carryon_common.core.subtask import SubtaskKind


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
