"""The one subtask type of a plan, shared by the planner, the judge and the harness
(core form of carryon_interfaces/Subtask; the plan's JSON schema is carryon_planner.core.plan)."""

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
class Subtask:
    """One subtask of a plan; names refer to scene memory and the skill library.

    `objective` is what the planner wants achieved and outranks `instruction` (the skill
    text copied verbatim from the library) whenever the two disagree. `condition` is an
    observable condition to run it ("" = always).
    """

    id: str
    kind: SubtaskKind
    objective: str = ""
    instruction: str = ""
    target: str = ""
    source: str = ""
    destination: str = ""
    depends_on: tuple[str, ...] = ()
    condition: str = ""
