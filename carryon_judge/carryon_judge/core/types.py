"""The judge's inputs and outputs as plain data, and the `Judge` interface every backend
implements.

Frames and units: points and positions are metres in `world` (z up); images follow ROS
conventions (rgb (H, W, 3) uint8, depth (H, W) float32 metres along the optical axis with
0 = no return, segmentation (H, W) int32 instance ids with a label table id -> name);
`intrinsics` is the 3x3 pinhole matrix K in pixels; `world_from_camera` the 4x4 pose of the
*optical* frame (z forward, x right, y down). Times are seconds on the caller's clock
(the node clock: simulation time in simulation).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from carryon_common.core.clouds import CameraView
from carryon_common.core.errors import CarryOnError
from carryon_common.core.subtask import Subtask


class VerdictStatus(enum.IntEnum):
    """Mirrors Verdict.STATUS_*."""

    RUNNING = 0
    SUCCESS = 1
    FAILED = 2
    UNABLE_TO_JUDGE = 3

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


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


@dataclass(frozen=True)
class Observation:
    """Everything the judge may look at for one instant.

    `ee_position`: tool centre point (3,) in world, metres, and `gripper_width_m`: measured
    distance between the fingers; both None when unknown. (The simulation harness's
    `SimObservation` adds the simulator's ground truth, for its oracle only.)
    """

    observation_id: int
    stamp_s: float
    views: tuple[CameraView, ...] = ()
    ee_position: npt.NDArray[np.float64] | None = None
    gripper_width_m: float | None = None

    def view(self, camera: str) -> CameraView | None:
        return next((v for v in self.views if v.camera == camera), None)


@dataclass(frozen=True)
class JudgeRequest:
    """One question to a judge: how is `subtask` doing now?

    `baseline`: the observation taken when the subtask started; `current`: the latest one;
    `recent`: optional older frames between the two (oldest first, for judges that look at
    a short history). `elapsed_s`: seconds since the subtask started; `since_progress_s`:
    seconds since the last task-relevant change of the target (< 0 = unknown).
    `completed`: subtasks already completed in this plan (their effects are not credited).
    """

    subtask: Subtask
    baseline: Observation
    current: Observation
    elapsed_s: float
    since_progress_s: float = -1.0
    completed: tuple[Subtask, ...] = ()
    recent: tuple[Observation, ...] = ()


class Judge(Protocol):
    """A judge backend. `judge` never raises for bad or missing inputs or a failing model:
    it returns UNABLE_TO_JUDGE with the reason (never SUCCESS on doubt)."""

    @property
    def name(self) -> str: ...

    def judge(self, request: JudgeRequest) -> JudgeVerdict: ...


class JudgeError(CarryOnError):
    """A judge could not decide; the message says why (becomes UNABLE_TO_JUDGE)."""


def unable(request: JudgeRequest, backend: str, reason: str) -> JudgeVerdict:
    """The UNABLE_TO_JUDGE verdict for `request`, with `reason`."""
    return JudgeVerdict(
        subtask_id=request.subtask.id,
        status=VerdictStatus.UNABLE_TO_JUDGE,
        reason=reason,
        backend=backend,
        confidence=0.0,
        observation_id=request.current.observation_id,
    )
