"""Cameras that disagree: before the segments one label names are fused into one object,
the geometry of the other cameras gets a say.

Each camera labels its own segments from their appearance, and a partial view can look
like another catalog entry: the white rim of a plate at the wrist camera's image border
reads as the bowl. Fused by label alone, that sliver would join the scene camera's bowl
70 cm away, and the "bowl" would sit between them (things resting on it, the shield's
obstacle names, the judge's facts all wrong). So:

1. A segment most of whose points lie on what another camera names differently, and which
   shows less of it (partial at the image border or behind something, or fewer points),
   takes that camera's label: the fuller view names the object.
2. The segments left under one label must be one object: those whose points are all
   further than `apart_m` from the label's best-matching segment (then the largest: a
   close-up has more points, not more evidence) are detached (they go on as unidentified
   segments, fused by proximity).
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from scipy.spatial import cKDTree

from carryon_perception.core.segment import Segment

C = TypeVar("C")  # a camera's working state; only its identity is used
Member = tuple[C, Segment, float]  # a segment of one camera and its label score


def reconcile(
    named: dict[str, list[Member[C]]], *, share: float, within_m: float, apart_m: float
) -> tuple[dict[str, list[Member[C]]], list[Member[C]]]:
    """`named`: label -> the segments the cameras gave it. Returns the labels' segments
    after (1) and (2) above, and the segments detached from their label."""
    trees: dict[int, Any] = {id(m[1]): cKDTree(m[1].points) for ms in named.values() for m in ms if len(m[1].points)}
    moves: dict[int, str] = {}
    for label, members in named.items():
        for cam, segment, _ in members:
            if len(segment.points) == 0:
                continue
            best, best_share = None, share
            for other_label, others in named.items():
                if other_label == label:
                    continue
                for other_cam, other, _ in others:
                    if other_cam is cam or id(other) not in trees:
                        continue
                    on = share_on(segment.points, trees[id(other)], within_m)
                    if on >= best_share and (segment.partial or len(segment.points) < len(other.points)):
                        best, best_share = other_label, on
            if best is not None:
                moves[id(segment)] = best
    out: dict[str, list[Member[C]]] = {}
    for label, members in named.items():
        for member in members:
            out.setdefault(moves.get(id(member[1]), label), []).append(member)
    detached: list[Member[C]] = []
    for label, members in list(out.items()):
        anchor = max(members, key=lambda m: (m[2], len(m[1].points)))  # the best match, then the most points
        if id(anchor[1]) not in trees:
            continue
        kept = [m for m in members if m is anchor or _near(m[1], trees[id(anchor[1])], apart_m)]
        detached.extend(m for m in members if not any(m is k for k in kept))
        out[label] = kept
    return out, detached


def share_on(points: npt.NDArray[np.float64], tree: Any, within_m: float) -> float:
    """The share of `points` within `within_m` of the points `tree` was built on."""
    distance, _ = tree.query(points, k=1, distance_upper_bound=within_m)
    return float(np.mean(np.isfinite(distance)))


def _near(segment: Segment, tree: Any, within_m: float) -> bool:
    if len(segment.points) == 0:
        return True
    distance, _ = tree.query(segment.points, k=1, distance_upper_bound=within_m)
    return bool(np.isfinite(distance).any())
