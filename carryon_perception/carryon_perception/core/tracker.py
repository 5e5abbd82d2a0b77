"""Instance identities that stay the same from frame to frame.

The judge compares a baseline with now and the shield's obstacle names must not flicker,
so an object keeps its track id for the whole run: a labelled object by its label (the
catalog labels each entry at most once per frame), an unknown one by where it is (the
nearest unknown track of the last frame within `match_distance_m`, else a new track).
Ids start at FIRST_TRACK_ID and are never reused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

from carryon_perception.core.types import FIRST_TRACK_ID, UNKNOWN_PREFIX, FloatArray


@dataclass(frozen=True)
class Track:
    track_id: int
    label: str


class Tracker:
    def __init__(self, match_distance_m: float = 0.06) -> None:
        self.match_distance_m = match_distance_m
        self._next_id = FIRST_TRACK_ID
        self._unknowns = 0
        self._by_label: dict[str, int] = {}
        self._last_unknown: list[tuple[Track, FloatArray]] = []

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def assign(self, labels: Sequence[str | None], centroids: Sequence[FloatArray]) -> list[Track]:
        """One track per object of this frame: `labels[i]` (None = unidentified) at
        `centroids[i]` (world, metres)."""
        tracks: list[Track | None] = [None] * len(labels)
        for i, label in enumerate(labels):
            if label is not None:
                if label not in self._by_label:
                    self._by_label[label] = self._new_id()
                tracks[i] = Track(self._by_label[label], label)
        unknown = [i for i, label in enumerate(labels) if label is None]
        if unknown and self._last_unknown:
            now = np.array([centroids[i] for i in unknown])
            before = np.array([c for _, c in self._last_unknown])
            cost = np.linalg.norm(now[:, None, :] - before[None, :, :], axis=2)
            rows, cols = linear_sum_assignment(cost)
            for r, c in zip(rows, cols, strict=True):
                if cost[r, c] <= self.match_distance_m:
                    tracks[unknown[r]] = self._last_unknown[c][0]
        for i in unknown:
            if tracks[i] is None:
                self._unknowns += 1
                tracks[i] = Track(self._new_id(), f"{UNKNOWN_PREFIX}{self._unknowns}")
        done = [t for t in tracks if t is not None]
        assert len(done) == len(tracks)
        self._last_unknown = [(done[i], np.asarray(centroids[i], dtype=np.float64)) for i in unknown]
        return done
