"""Helpers of the judge tests: facts builders, subtasks, requests."""

from __future__ import annotations

import numpy as np

from carryon_common.core.clouds import CameraView
from carryon_common.core.subtask import Subtask, SubtaskKind
from carryon_judge.core.rules import ObjectFacts, SceneFacts
from carryon_judge.core.types import JudgeRequest, Observation

PLACE = Subtask("s2", SubtaskKind.VLA, "the carrot in the bowl", "put the carrot in the bowl", "carrot", "", "bowl")
UNCOVER = Subtask("s1", SubtaskKind.VLA, "uncover the carrot", "open the pink cover", "pink_cover")
OBSERVE = Subtask("o1", SubtaskKind.OBSERVE, "report what is under the pink cover", "", "pink_cover")


def fact(name: str, x: float = 0.5, y: float = 0.0, *, inside: str = "", held: bool = False, z: float = 0.42,
         hides: frozenset[str] | None = None, height: float = 0.03) -> ObjectFacts:  # fmt: skip
    return ObjectFacts(name, True, np.array([x, y]), z, z + height, held, inside, hides)


def scene(*objects: ObjectFacts) -> SceneFacts:
    return SceneFacts({o.name: o for o in objects}, "test")


def rgb_request() -> JudgeRequest:
    """A request with one 32x24 colour image per observation (for the VLM)."""
    rng = np.random.default_rng(0)

    def obs(i: int) -> Observation:
        view = CameraView("scene", float(i), rgb=rng.integers(0, 255, (24, 32, 3), dtype=np.uint8))
        return Observation(i, float(i), (view,))

    return JudgeRequest(PLACE, obs(1), obs(2), elapsed_s=3.0, since_progress_s=1.0, completed=(UNCOVER,))
