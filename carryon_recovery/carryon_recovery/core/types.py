"""Recovery outcomes as plain data."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Outcome(enum.IntEnum):
    """Mirrors Recover.Result.OUTCOME_*."""

    RESUME = 0
    RESUME_UNVERIFIED = 1
    ABORTED = 2
    NOT_IMPLEMENTED = 3


@dataclass(frozen=True)
class RecoveryResult:
    """What a recovery skill achieved; `steps` = control steps executed."""

    outcome: Outcome
    message: str
    steps: int
    skill: str
    version: int
