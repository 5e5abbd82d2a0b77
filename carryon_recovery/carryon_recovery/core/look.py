"""The look motion: the planner's observe asks for it when no camera sees a named location
(perception reports the location out of view). The tool goes up, across and over the
location's centre, fingers down, so the wrist camera (mounted along the fingers) looks
straight at the region; every step passes the shield like any recovery motion. A Recover
goal with skill `look` and the location as its target runs it (runner.py)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from carryon_common.core import names
from carryon_common.core.locations import Location
from carryon_recovery.core.base_skill import OPEN, RecoveryIO
from carryon_recovery.core.grasp import DOWN, FloatArray, transit
from carryon_recovery.core.types import Outcome

LOOK_SKILL = names.LOOK_SKILL


def look_pose(location: Location, tool_height_m: float) -> FloatArray:
    """Where the tool looks from: over the region's centre at `tool_height_m` (world z)."""
    out: FloatArray = np.array([location.center[0], location.center[1], tool_height_m], dtype=np.float64)
    return out


def run_look(
    io: RecoveryIO, location_name: str, locations: Mapping[str, Location], *, tool_height_m: float
) -> tuple[Outcome, str]:
    """Move over `location_name` (one of `locations`), fingers down and open. RESUME when
    the tool got there; ABORTED naming why not (an unknown location, a refused or
    unreachable step): the observe then reports that it could not see."""
    location = locations.get(location_name)
    if location is None:
        known = ", ".join(sorted(locations)) or "none"
        return Outcome.ABORTED, f"look: unknown location {location_name!r} (named locations: {known})"
    goal = look_pose(location, tool_height_m)
    start = io.tool_position()
    reached, why = io.move(transit(start, goal, None), DOWN, OPEN)
    if not reached:
        return Outcome.ABORTED, f"look at {location_name}: did not get over it ({why})"
    return Outcome.RESUME, f"looking at {location_name} from {np.round(goal, 3).tolist()}"
