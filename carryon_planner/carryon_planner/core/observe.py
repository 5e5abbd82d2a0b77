"""What a look at a named location shows, from what perception sees (perception/scene).

An observe subtask names a location of the planner's own locations file (a region on the
table). The objects perception reports whose centre lies in that region, or in no named
region but within `margin_m` of it (the cameras see a little around it), are what the look
shows: "meat in plate" when perception says an object rests on another one, the bare label
otherwise. An object perception could not identify is reported as its `unknown_<n>` label:
the planner sees that something unidentified is there, when it is at least
`min_unidentified_m` across (smaller unidentified pieces are fragments at the edge of the
arm or of what it holds; they stay obstacles for the shield, which reads the masks). Objects held in the gripper are not
"at" any location. What the cameras cannot see (under a cover, out of view) is not
reported: an observe reports only what was seen, and says when nothing could be seen.

One segmented frame can be wrong (an object split or merged while the arm moves away, a
label that flickers), and a wrong look makes the executive replan. An observe therefore
combines a few consecutive scenes (`agree`): an item is in the look when most of them show
it (at least half, for an even count). Unidentified objects have no stable name across frames (their `unknown_<n>` may
change), so they are counted by kind ("unknown in plate") and named as the latest scene
names them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from carryon_common.core.locations import Location, region_of

UNKNOWN_PREFIX = "unknown_"
_UNKNOWN_WORD = re.compile(r"\bunknown_\w+")
_ANY_UNKNOWN = "unknown_?"  # an unidentified object, whatever its number


@dataclass(frozen=True)
class Seen:
    """One perceived object, as observe needs it."""

    label: str
    x: float
    y: float
    support: str = ""  # a support plane ("table", "support_1"), another object's label, or ""
    held: bool = False  # in the gripper
    size_m: float = float("inf")  # its largest extent (bounding box), m


def is_unidentified(label: str) -> bool:
    return label.startswith(UNKNOWN_PREFIX)


def visible_items(
    objects: Iterable[Seen],
    location: str,
    regions: Mapping[str, Location],
    *,
    margin_m: float = 0.1,
    planes: Iterable[str] = ("table",),
    min_unidentified_m: float = 0.03,
) -> tuple[str, ...]:
    """The items a look at `location` shows (sorted): objects whose centre lies in its
    region, or in no region and within `margin_m` of it; "X in Y" when X rests on the
    perceived object Y (not on a support plane in `planes`). Unidentified objects smaller
    than `min_unidentified_m` are left out."""
    region = regions.get(location)
    if region is None:
        return ()
    surfaces = set(planes)
    items = []
    for obj in objects:
        if obj.held or (is_unidentified(obj.label) and obj.size_m < min_unidentified_m):
            continue
        owner = region_of((obj.x, obj.y), dict(regions))
        if owner != location and (owner or not _near(region, obj.x, obj.y, margin_m)):
            continue
        host = obj.support if obj.support and obj.support not in surfaces else ""
        items.append(f"{obj.label} in {host}" if host else obj.label)
    return tuple(sorted(items))


def agree(looks: Sequence[tuple[str, ...]]) -> tuple[str, ...]:
    """The items at least half of `looks` (visible_items of consecutive scenes, oldest
    first) show: each item kept as many times as the median look shows it (with three
    looks, an item two of them show). Unidentified objects are counted by kind and named as in the
    latest look that shows that many of them."""
    if not looks:
        return ()
    counts = [Counter(_kind(item) for item in look) for look in looks]
    out: list[str] = []
    for key in sorted(set().union(*counts)):
        times = sorted(c[key] for c in counts)[len(looks) // 2]  # the median (upper, for an even count)
        if not times:
            continue
        if _ANY_UNKNOWN not in key:
            out.extend([key] * times)
            continue
        for look in reversed(looks):
            names = [item for item in look if _kind(item) == key]
            if len(names) >= times:
                out.extend(sorted(names)[:times])
                break
    return tuple(sorted(out))


def _kind(item: str) -> str:
    return _UNKNOWN_WORD.sub(_ANY_UNKNOWN, item)


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
