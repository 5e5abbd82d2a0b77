"""Task predicates from ground truth: where an object is, what it is in, what covers it.

Geometry is approximate on purpose (circles of each object type's footprint and its
height above the table): good for metrics and tests, never used by the runtime's
perception. Distances in metres, world frame.
"""

from __future__ import annotations

import math

from carryon_sim.core.contacts import grasped_objects, object_contacts
from carryon_sim.core.objects import Role
from carryon_sim.core.types import ObjectTruth
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


def object_truths(world: World) -> list[ObjectTruth]:
    """Ground truth of every object: pose, place, grasp, contacts, container and cover (for
    sim/truth and sim/state: benchmarks and tests, never a robot's runtime)."""
    grasped = grasped_objects(world.model, world.data, world.object_of_body)
    contacts = object_contacts(world.model, world.data, world.object_of_body)
    objects = []
    for obj in world.scene.spec.objects:
        body = world.model.body(obj.name).id
        x, y, z = (float(v) for v in world.data.xpos[body])
        qw, qx, qy, qz = (float(v) for v in world.data.xquat[body])
        inside, cover = inside_of(world, obj.name), covered_by(world, obj.name)
        touching = {other for pair in contacts if obj.name in pair for other in pair - {obj.name}}
        expected = {"robot", "table", inside, cover}  # its support, its cover, the gripper
        objects.append(
            ObjectTruth(
                obj.name,
                (x, y, z),
                (qw, qx, qy, qz),
                location=location_of(world, obj.name),
                grasped=obj.name in grasped,
                in_contact=bool(touching - expected),
                inside=inside,
                covered_by=cover,
            )
        )
    return objects
