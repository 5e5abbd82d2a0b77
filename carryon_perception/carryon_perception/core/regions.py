"""Named image regions: what an image model (the `open_vocab` backend's detector and
segmenter) says is where in one camera's colour image, and how those regions become
labelled segments of the tabletop pipeline before the depth segmentation runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from carryon_common.core.clouds import CameraView
from carryon_perception.core.segment import Segment
from carryon_perception.core.types import FloatArray

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class NamedMask:
    """A region of one camera's colour image that an image model named: `label` (an object
    name), `score` 0..1, `mask` (H, W) bool in that camera's pixels."""

    label: str
    score: float
    mask: BoolArray


class Recogniser(Protocol):
    """Names regions of one camera's colour image (an open-vocabulary detector + segmenter).
    At most one region per label; regions may overlap."""

    def recognise(self, view: CameraView) -> list[NamedMask]: ...


def named_segments(
    regions: Sequence[NamedMask],
    candidate: BoolArray,
    points: FloatArray,
    rgb: npt.NDArray[np.uint8],
    min_share: float,
) -> tuple[list[Segment], list[tuple[str, float]], BoolArray]:
    """The regions as labelled segments of the `candidate` pixels (H, W: what stands on a
    support), their (label, score), and the pixels they claimed (H, W).

    Smaller regions take their pixels first: an object nested in another's region (a carrot
    in a bowl) keeps its own. Only candidate pixels are named, and a region of which less
    than `min_share` is candidate (mostly the robot, the table or beyond range) names none.
    `points` (H, W, 3) world metres and `rgb` (H, W, 3) fill the segments. ValueError when a
    mask is not the image's size."""
    claimed = np.zeros_like(candidate)
    segments: list[Segment] = []
    names: list[tuple[str, float]] = []
    if not regions:
        return segments, names, claimed
    flat_points, flat_rgb = points.reshape(-1, 3), rgb.reshape(-1, 3)
    for region in sorted(regions, key=lambda r: int(np.count_nonzero(r.mask))):
        if region.mask.shape != candidate.shape:
            raise ValueError(f"region {region.label!r}: mask {region.mask.shape}, image {candidate.shape}")
        on_support = region.mask & candidate
        if np.count_nonzero(on_support) < min_share * max(1, int(np.count_nonzero(region.mask))):
            continue
        pixels = np.flatnonzero(on_support & ~claimed)
        if len(pixels) == 0:
            continue
        claimed.reshape(-1)[pixels] = True
        segments.append(Segment(pixels=pixels, points=flat_points[pixels], colors=flat_rgb[pixels]))
        names.append((region.label, float(region.score)))
    return segments, names, claimed
