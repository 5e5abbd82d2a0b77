"""core/fuse.py: cameras that label one object differently, or two objects alike."""

from __future__ import annotations

import numpy as np

from carryon_perception.core.fuse import reconcile
from carryon_perception.core.segment import Segment


def disc(x: float, y: float, radius: float, *, step: float = 0.005, partial: bool = False) -> Segment:
    """A flat disc of points on the table (z = 0.43)."""
    grid = np.mgrid[-radius:radius:step, -radius:radius:step].reshape(2, -1).T
    grid = grid[np.linalg.norm(grid, axis=1) <= radius]
    points = np.column_stack([grid[:, 0] + x, grid[:, 1] + y, np.full(len(grid), 0.43)])
    return Segment(np.arange(len(points)), points, np.zeros((len(points), 3), np.uint8), partial=partial)


SCENE, WRIST = object(), object()
KW = {"share": 0.5, "within_m": 0.015, "apart_m": 0.05}


def test_a_partial_view_takes_the_label_of_the_fuller_view_it_lies_on() -> None:
    plate, bowl = disc(0.55, 0.45, 0.09), disc(0.55, -0.3, 0.07)
    rim = disc(0.55, 0.38, 0.02, partial=True)  # the wrist camera sees the plate's rim at its border...
    named = {"plate": [(SCENE, plate, 0.9)], "bowl": [(SCENE, bowl, 0.9), (WRIST, rim, 0.6)]}  # ...as the bowl
    out, detached = reconcile(named, **KW)
    assert [m[1] for m in out["plate"]] == [plate, rim] and [m[1] for m in out["bowl"]] == [bowl]
    assert detached == []


def test_the_fuller_view_keeps_its_label() -> None:
    plate, rim = disc(0.55, 0.45, 0.09), disc(0.55, 0.38, 0.02, partial=True)
    # the scene camera's plate lies mostly off the wrist's rim: it is not renamed after it
    out, _ = reconcile({"plate": [(SCENE, plate, 0.9)], "bowl": [(WRIST, rim, 0.6)]}, **KW)
    assert [m[1] for m in out["plate"]] == [plate, rim] and not out.get("bowl")


def test_one_label_on_two_places_keeps_the_largest_and_detaches_the_other() -> None:
    bowl, elsewhere = disc(0.55, -0.3, 0.07), disc(0.3, 0.3, 0.03)  # seen apart by two cameras, no other view
    out, detached = reconcile({"bowl": [(SCENE, bowl, 0.9), (WRIST, elsewhere, 0.7)]}, **KW)
    assert [m[1] for m in out["bowl"]] == [bowl] and [m[1] for m in detached] == [elsewhere]


def test_the_best_match_keeps_the_label_not_the_close_up_with_more_points() -> None:
    # the wrist camera's close-up of a plate's piece (many points, a poor match for the bowl)
    # and the scene camera's bowl (fewer points, a good match), far apart
    bowl, piece = disc(0.55, -0.3, 0.07, step=0.01), disc(0.48, 0.46, 0.05, step=0.003)
    out, detached = reconcile({"bowl": [(SCENE, bowl, 0.99), (WRIST, piece, 0.27)]}, **KW)
    assert [m[1] for m in out["bowl"]] == [bowl] and [m[1] for m in detached] == [piece]


def test_two_views_of_one_object_stay_together() -> None:
    scene, close_up = disc(0.55, -0.3, 0.07, step=0.01), disc(0.56, -0.3, 0.05, step=0.004)
    out, detached = reconcile({"bowl": [(SCENE, scene, 0.9), (WRIST, close_up, 0.8)]}, **KW)
    assert len(out["bowl"]) == 2 and detached == []
