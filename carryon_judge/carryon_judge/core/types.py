"""Verdicts as plain data."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class VerdictStatus(enum.IntEnum):
    """Mirrors Verdict.STATUS_*."""

    RUNNING = 0
    SUCCESS = 1
    FAILED = 2
    UNABLE_TO_JUDGE = 3


@dataclass(frozen=True)
class JudgeVerdict:
    """A judge's decision on one subtask; confidence in [0, 1]."""

    subtask_id: str
    status: VerdictStatus
    reason: str
    backend: str
    revealed_contents: tuple[str, ...] = ()
    scene_update_required: bool = False
    confidence: float = 1.0
    observation_id: int = 0
