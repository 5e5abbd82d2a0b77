"""What a link drop between the robot PC and the GPU box did, read from the robot side's
timelines (link_probe's JSON: releases, shield decisions, tool poses; wall-clock seconds).

* `hold_s`: from the drop until the tool stopped for good (it then stays within
  `HOLD_TOLERANCE_M` of where it is when the link comes back): the chunk in execution
  finishes and the driver holds, nothing new arrives;
* `refused_stale`: chunks the shield refused as stale in the `AFTER_S` after the link came
  back (chunks computed before or during the drop and delivered late);
* `resume_s`: from the link coming back until the next chunk was released (the graph
  recovered without a restart), None when none was within the probe's run;
* `last_release_s`: how long before the drop the last chunk was released, and
  `moving_at_drop`: the tool moved more than `MOVING_M` in the `MOVING_S` before the drop
  (else "held" says nothing: the arm was still anyway).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HOLD_TOLERANCE_M = 0.001
AFTER_S = 10.0
MOVING_M, MOVING_S = 0.002, 0.5
REJECTED_STALE = 3  # ShieldEvent.DECISION_REJECTED_STALE (core code imports no messages)


@dataclass(frozen=True)
class DropFigures:
    drop_s: float
    last_release_s: float | None
    moving_at_drop: bool
    hold_s: float | None
    refused_stale: int
    resume_s: float | None


def figures(timelines: dict[str, Sequence[Any]], down_at: float, up_at: float) -> DropFigures:
    released = [float(r[0]) for r in timelines.get("released", ())]
    before = [t for t in released if t <= down_at]
    after = [t for t in released if t > up_at]
    poses = [(float(p[0]), (float(p[1]), float(p[2]), float(p[3]))) for p in timelines.get("poses", ())]
    during = [(t, xyz) for t, xyz in poses if down_at <= t <= up_at]
    hold_s: float | None = None
    if during:
        final = during[-1][1]
        away = [t for t, xyz in during if math.dist(xyz, final) > HOLD_TOLERANCE_M]
        hold_s = (max(away) if away else down_at) - down_at
    lead = [xyz for t, xyz in poses if down_at - MOVING_S <= t <= down_at]
    moving = any(math.dist(xyz, lead[-1]) > MOVING_M for xyz in lead)
    stale = sum(
        1
        for d in timelines.get("decisions", ())
        if int(d[1]) == REJECTED_STALE and up_at < float(d[0]) <= up_at + AFTER_S
    )
    return DropFigures(
        drop_s=up_at - down_at,
        last_release_s=down_at - max(before) if before else None,
        moving_at_drop=moving,
        hold_s=hold_s,
        refused_stale=stale,
        resume_s=min(after) - up_at if after else None,
    )
