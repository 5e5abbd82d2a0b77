"""Time since the last task-relevant progress, tracked by judge_node in monitor mode (and
by the benchmark that records states).

Progress is a change of the *target object* that matters for the subtask: it became held
or released, went into or out of a container, appeared or disappeared, or it got more
than `threshold_m` closer to its goal than ever before in this subtask (towards the
destination for a placement, away from where it stood for a cover). Without a goal point
any displacement beyond `threshold_m` from the last progress counts. Arm motion alone,
and an object jittering in a stuck gripper, never count. A change of state (held, inside,
seen) counts only once it holds for `confirm_updates` updates in a row (judge_node: 2, its
`progress_confirm_updates`): perception that flickers (a carrot at a plate's rim seen in it
one frame and beside it the next, a target hidden by the arm for a frame) is not progress.
The default 1 (every change counts at once) suits facts without flicker (the simulator's truth).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from carryon_judge.core.rules import Goal, GoalSpec, ObjectFacts, SceneFacts

Point = npt.NDArray[np.float64]


@dataclass
class ProgressTracker:
    """Feed it the target's facts (None = not seen) with the node-clock time, seconds.
    `toward`: the goal's (x, y) (the destination); `away_from`: the (x, y) to leave (a
    cover's baseline place)."""

    threshold_m: float
    toward: Point | None = None
    away_from: Point | None = None
    confirm_updates: int = 1
    _last_progress_s: float | None = None
    _pending: tuple[bool, bool, str] | None = None  # a new state (seen, held, inside) not confirmed yet
    _pending_count: int = 0
    _reference: ObjectFacts | None = None
    _best: float = float("inf")

    def start(self, now_s: float, target: ObjectFacts | None) -> None:
        self._last_progress_s = now_s
        self._reference = target
        self._best = self._score(target)

    def update(self, now_s: float, target: ObjectFacts | None) -> float:
        """Seconds since the last progress (< 0 before `start`)."""
        if self._last_progress_s is None:
            return -1.0
        if self._changed(target) and self._confirmed(target):
            self._last_progress_s = now_s
            self._reference = target
            self._best = min(self._best, self._score(target))
        return now_s - self._last_progress_s

    def _score(self, target: ObjectFacts | None) -> float:
        """Lower is closer to the goal (metres); inf when unknown."""
        if target is None:
            return float("inf")
        if self.toward is not None:
            return float(np.linalg.norm(target.center - self.toward))
        if self.away_from is not None:
            return -float(np.linalg.norm(target.center - self.away_from))
        return float("inf")

    @staticmethod
    def _state(target: ObjectFacts | None) -> tuple[bool, bool, str]:
        return (False, False, "") if target is None else (True, bool(target.held), target.inside or "")

    def _confirmed(self, target: ObjectFacts | None) -> bool:
        """A change of state counts once seen `confirm_updates` times in a row (a move closer
        to the goal, with the state unchanged, counts at once)."""
        state = self._state(target)
        if state == self._state(self._reference):
            self._pending, self._pending_count = None, 0
            return True
        if state != self._pending:
            self._pending, self._pending_count = state, 0
        self._pending_count += 1
        if self._pending_count < self.confirm_updates:
            return False
        self._pending, self._pending_count = None, 0
        return True

    def _changed(self, target: ObjectFacts | None) -> bool:
        ref = self._reference
        if (target is None) != (ref is None):
            return True
        if target is None or ref is None:
            return False
        if target.held != ref.held or target.inside != ref.inside:
            return True
        if self.toward is not None or self.away_from is not None:
            return self._score(target) < self._best - self.threshold_m
        moved = float(np.linalg.norm(np.append(target.center - ref.center, target.bottom_z - ref.bottom_z)))
        return moved > self.threshold_m


def tracker_for(goal: GoalSpec, baseline: SceneFacts, threshold_m: float, confirm_updates: int = 1) -> ProgressTracker:
    """A tracker whose goal point fits the subtask: towards the destination (placing),
    away from the cover's baseline place (uncovering), plain displacement otherwise."""
    if goal.goal == Goal.PLACE and (dest := baseline.visible(goal.destination)) is not None:
        return ProgressTracker(threshold_m, toward=dest.center.copy(), confirm_updates=confirm_updates)
    if goal.goal == Goal.UNCOVER and (cover := baseline.visible(goal.target)) is not None:
        return ProgressTracker(threshold_m, away_from=cover.center.copy(), confirm_updates=confirm_updates)
    return ProgressTracker(threshold_m, confirm_updates=confirm_updates)
