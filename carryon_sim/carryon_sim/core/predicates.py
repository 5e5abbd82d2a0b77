"""Task predicates from ground truth: where an object is, what it is in, what covers it.

Geometry is approximate on purpose (circles of each object type's footprint and its
height above the table): good for metrics and tests, never used by the runtime's
perception. Distances in metres, world frame.
"""

from __future__ import annotations

import math

from carryon_sim.core.objects import Role
from carryon_sim.core.world import World


def location_of(world: World, name: str) -> str:
    """Named location whose region contains the object's x/y ("" when none)."""
    x, y, _ = world.object_position(name)
    for location, spec in world.scene.spec.locations.items():
        (cx, cy), (sx, sy) = spec.center, spec.size
        if abs(x - cx) <= sx / 2 and abs(y - cy) <= sy / 2:
            return location
    return ""


def _within(world: World, name: str, host: str, above_m: float) -> bool:
    spec = world.scene.object(host)
    hx, hy, hz = world.object_position(host)
    x, y, z = world.object_position(name)
    radius = spec.kind.footprint_m * spec.scale
    return math.hypot(x - hx, y - hy) < radius and hz - 0.01 <= z <= hz + spec.kind.height_m * spec.scale + above_m


def inside_of(world: World, name: str) -> str:
    """Container or support the object is in / on ("" when none)."""
    for host in [*world.objects_with_role(Role.CONTAINER), *world.objects_with_role(Role.SUPPORT)]:
        if host != name and _within(world, name, host, above_m=0.03):
            return host
    return ""


def covered_by(world: World, name: str) -> str:
    """Cover hiding the object ("" when uncovered)."""
    for cover in world.objects_with_role(Role.COVER):
        if cover != name and _within(world, name, cover, above_m=0.0):
            return cover
    return ""
