"""The text-prompted grounder: pixels get names from an open-vocabulary segmenter prompted
with the task's names (and the robot prompts); when text finds no mask for the target or
destination, an optional `PointPrompter` (a VLM pointing at the object) seeds a
depth-connected region. The rest of the recipe is grounding.py's (`fuse_labelled`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt
from scipy import ndimage

from carryon_common.core import contact_rules as rules
from carryon_shield.core.grounding import ROBOT, UNKNOWN, GroundingParams, fuse_labelled
from carryon_shield.core.types import IntArray, ObstacleSet, PerceptionUnavailable, RgbdFrame, SelfFilter, TaskSpec


class Segmenter(Protocol):
    """Open-vocabulary segmentation: one boolean mask (H, W) per prompt (all-False when
    the prompt is not found). rgb: (H, W, 3) uint8."""

    def segment(self, rgb: npt.NDArray[np.uint8], prompts: Sequence[str]) -> dict[str, npt.NDArray[np.bool_]]: ...


class PointPrompter(Protocol):
    """A VLM asked to point at a named object: pixel (row, col) or None when it cannot."""

    def point(self, rgb: npt.NDArray[np.uint8], name: str) -> tuple[int, int] | None: ...


def region_from_point(
    depth: npt.NDArray[np.floating], seed: tuple[int, int], *, tolerance_m: float = 0.02, max_radius_px: int = 60
) -> npt.NDArray[np.bool_]:
    """The object around a pixel (e.g. where a VLM pointed): the connected pixels whose
    depth is within `tolerance_m` of the seed's, within `max_radius_px`. (H, W) bool."""
    height, width = depth.shape
    row, col = seed
    out = np.zeros(depth.shape, dtype=bool)
    if not (0 <= row < height and 0 <= col < width) or not np.isfinite(depth[row, col]) or depth[row, col] <= 0:
        return out
    r0, r1 = max(0, row - max_radius_px), min(height, row + max_radius_px + 1)
    c0, c1 = max(0, col - max_radius_px), min(width, col + max_radius_px + 1)
    window = np.asarray(depth[r0:r1, c0:c1], dtype=np.float64)
    close = np.abs(window - float(depth[row, col])) < tolerance_m
    regions, _ = ndimage.label(close)
    out[r0:r1, c0:c1] = regions == regions[row - r0, col - c0]
    return out


class TextPromptedGrounder:
    """Names pixels with an open-vocabulary segmenter prompted with the task's object
    names and the robot prompts. Unclaimed pixels are unnamed obstacles. When text finds
    no mask for the target or destination, `point_prompter` (if any) is asked to point at
    it and a depth-connected region around that pixel becomes its mask."""

    name = "text_prompted"

    def __init__(
        self,
        params: GroundingParams,
        segmenter: Segmenter,
        robot_prompts: Sequence[str],
        point_prompter: PointPrompter | None = None,
    ) -> None:
        self.params = params
        self.segmenter = segmenter
        self.robot_prompts = tuple(robot_prompts)
        self.point_prompter = point_prompter
        self.supports = rules.SupportTracker()  # what the target rested on before the grasp
        self.point_prompted: list[str] = []  # names found by pointing, most recent call (for events / tests)

    def masks(self, frame: RgbdFrame, task: TaskSpec) -> dict[str, npt.NDArray[np.bool_]]:
        """Object name (or ROBOT) -> mask (H, W) for one frame."""
        if frame.rgb is None:
            raise PerceptionUnavailable(f"camera {frame.camera!r}: text grounding needs a color image")
        objects = [n for n in (task.target, task.source, task.destination, *task.permitted) if n]
        found = self.segmenter.segment(frame.rgb, [*objects, *self.robot_prompts])
        out: dict[str, npt.NDArray[np.bool_]] = {}
        robot = np.zeros(frame.depth.shape, dtype=bool)
        for prompt in self.robot_prompts:
            robot |= found.get(prompt, robot)
        out[ROBOT] = robot
        for name in objects:
            mask = found.get(name)
            if (
                (mask is None or not mask.any())
                and self.point_prompter is not None
                and name
                in (
                    task.target,
                    task.destination,
                )
            ):
                seed = self.point_prompter.point(frame.rgb, name)
                if seed is not None:
                    mask = region_from_point(frame.depth, seed)
                    self.point_prompted.append(name)
            if mask is not None and mask.any():
                out[name] = mask
        return out

    def ground(
        self,
        frames: Sequence[RgbdFrame],
        task: TaskSpec,
        self_filter: SelfFilter | None = None,
        *,
        holding: bool = False,
    ) -> ObstacleSet:
        if not frames:
            raise PerceptionUnavailable("no camera frames")
        self.point_prompted = []
        names: list[str] = [UNKNOWN]
        label_images: dict[str, IntArray] = {}
        for frame in frames:
            masks = self.masks(frame, task)
            label_image = np.zeros(frame.depth.shape, dtype=np.int32)
            # Later names win overlaps: robot last, so the arm is never an obstacle.
            for name in sorted(masks, key=lambda n: n == ROBOT):
                if name not in names:
                    names.append(name)
                label_image[masks[name]] = names.index(name)
            label_images[frame.camera] = label_image.reshape(-1)
        stamp = min(f.depth_stamp_s for f in frames)
        return fuse_labelled(
            frames,
            lambda frame, flat: label_images[frame.camera][flat],
            names,
            task,
            params=self.params,
            stamp_s=stamp,
            self_filter=self_filter,
            holding=holding,
            supports=self.supports,
        )
