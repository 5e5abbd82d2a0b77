"""Kinds of plan subtasks, shared by the planner and the judge (mirrors Subtask.KIND_*)."""

from __future__ import annotations

import enum


class SubtaskKind(enum.StrEnum):
    """Mirrors Subtask.KIND_*."""

    VLA = "vla"
    OBSERVE = "observe"
    SAY = "say"
    CONTROL = "control"
