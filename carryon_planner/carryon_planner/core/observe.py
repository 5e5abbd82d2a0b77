"""What a look at a named location shows, from what perception sees (perception/scene).

An observe subtask names a location of the planner's own locations file (a region on the
table). The objects perception reports whose centre lies in that region, or in no named
region but within `margin_m` of it (the cameras see a little around it), are what the look
shows: "meat in plate" when perception says an object rests on another one, the bare label
otherwise. An object perception could not identify is reported as its `unknown_<n>` label:
the planner sees that something unidentified is there. Objects held in the gripper are not
"at" any location. What the cameras cannot see (under a cover, out of view) is not
reported: an observe reports only what was seen, and says when nothing could be seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from carryon_common.core.locations import Location, region_of

UNKNOWN_PREFIX = "unknown_"


@dataclass(frozen=True)
class Seen:
    """One perceived object, as observe needs it."""

    label: str
    x: float
    y: float
    support: str = ""  # a support plane ("table", "support_1"), another object's label, or ""
    held: bool = False  # in the gripper


def is_unidentified(label: str) -> bool:
    return label.startswith(UNKNOWN_PREFIX)


def visible_items(
    objects: Iterable[Seen],
    location: str,
    regions: Mapping[str, Location],
    margin_m: float = 0.1,
    planes: Iterable[str] = ("table",),
) -> tuple[str, ...]:
    """The items a look at `location` shows (sorted): objects whose centre lies in its
    region, or in no region and within `margin_m` of it; "X in Y" when X rests on the
    perceived object Y (not on a support plane in `planes`)."""
    region = regions.get(location)
    if region is None:
        return ()
    surfaces = set(planes)
    items = []
    for obj in objects:
        if obj.held:
            continue
        owner = region_of((obj.x, obj.y), dict(regions))
        if owner != location and (owner or not _near(region, obj.x, obj.y, margin_m)):
            continue
        host = obj.support if obj.support and obj.support not in surfaces else ""
        items.append(f"{obj.label} in {host}" if host else obj.label)
    return tuple(sorted(items))


def describe_look(location: str, items: tuple[str, ...]) -> str:
    """One line for the operator: what the look showed, unidentified objects called so."""
    if not items:
        return f"{location} shows nothing"
    named = [i for i in items if not is_unidentified(i.split()[0])]
    unknown = [i for i in items if is_unidentified(i.split()[0])]
    parts = list(named)
    if unknown:
        parts.append(f"{len(unknown)} unidentified object(s) ({', '.join(unknown)})")
    return f"{location} shows {', '.join(parts)}"


def _near(region: Location, x: float, y: float, margin_m: float) -> bool:
    (cx, cy), (sx, sy) = region.center, region.size
    return abs(x - cx) <= sx / 2 + margin_m and abs(y - cy) <= sy / 2 + margin_m
