"""SIMULATOR-ONLY observe (`observe_source: sim_truth`): what a look at a named location
shows, read from the simulator's ground truth (`sim/truth`), a SIMULATOR ORACLE stand-in
for perception that every report says it is. The robot profile sets `observe_source: none`;
an observe from the cameras needs perception (issue 18) and replaces this module.

The location's region comes from the planner's own locations file (core/locations.py),
never from a simulator scene file; in-process, `carryon_sim.harness.dispatch.visible_items`
sees the same on the World.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from carryon_common.convert import time_from_msg
from carryon_common.core.locations import Location
from carryon_common.core.names import ORACLE_LABEL
from carryon_interfaces.msg import ObjectState, SimTruth
from carryon_planner.core.executive import Report

_POLL_S = 0.05
_FRESH_S = 1.0  # a snapshot at most this old (node clock) counts as taken after the request


def visible_from_truth(
    objects: Iterable[ObjectState], location: str, region: Location | None = None, margin_m: float = 0.1
) -> tuple[str, ...]:
    """What a look at `location` shows from simulator ground truth (SIMULATOR ORACLE), as
    the harness's `visible_items` sees it in-process: uncovered objects in its region, or
    in no region but within `margin_m` of it (the camera sees a little around), "X in Y"
    when X lies in / on Y."""

    def near(o: ObjectState) -> bool:
        if region is None:
            return False
        (cx, cy), (sx, sy) = region.center, region.size
        x, y = o.pose.position.x, o.pose.position.y
        return abs(x - cx) <= sx / 2 + margin_m and abs(y - cy) <= sy / 2 + margin_m

    items = [
        f"{o.name} in {o.inside}" if o.inside else o.name
        for o in objects
        if (o.location == location or (not o.location and near(o))) and not o.covered_by
    ]
    return tuple(sorted(items))


def observe_from_sim_truth(
    latest: Callable[[], SimTruth | None],
    now_s: Callable[[], float],
    location: str,
    region: Location | None,
    timeout_s: float,
) -> Report:
    """Wait (at most `timeout_s` wall-clock seconds) for a `sim/truth` snapshot taken after
    the request (the previous motion has settled), then report what `location` shows.
    `latest()` gives the newest snapshot, `now_s()` the node clock in seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        truth = latest()
        asked = now_s()
        if truth is not None and asked - time_from_msg(truth.header.stamp) <= _FRESH_S:
            break
        if time.monotonic() > deadline:
            return Report(False, "observe: no fresh sim/truth (is sim_node running?)")
        time.sleep(_POLL_S)
    items = visible_from_truth(truth.objects, location, region)
    message = f"{ORACLE_LABEL}: {location} shows {', '.join(items) or 'nothing'}"
    return Report(True, message, {location: items})
