"""The catalogue of object types a scene file may use, built from MuJoCo primitives.

Every object is one body named after the object; its geoms are named `<object>/<part>`,
so contacts and segmentation map back to object names. Sizes are metres; an object's
`footprint_m` is the radius of the circle it covers on the table (used to reject
overlapping placements).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

import mujoco

Rgba = tuple[float, float, float, float]


class Role(enum.StrEnum):
    ITEM = "item"  # something to pick up and move
    CONTAINER = "container"  # something to put items into
    SUPPORT = "support"  # something to put items onto
    COVER = "cover"  # something that can hide an item beneath it
    OBSTACLE = "obstacle"  # fixed; touching it is a safety violation


@dataclass(frozen=True)
class ObjectType:
    """A kind of object: geometry builder plus what the rest of the system needs to know."""

    role: Role
    footprint_m: float  # radius of the circle covered on the table
    height_m: float  # total height above the table
    rgba: Rgba
    mass_kg: float
    movable: bool  # free joint (True) or fixed to the table (False)
    build: Callable[[mujoco.MjsBody, str, float, Rgba, float], None]  # (body, name, scale, rgba, mass)


def _geom(
    body: mujoco.MjsBody,
    name: str,
    kind: mujoco.mjtGeom,
    *,
    size: list[float],
    pos: list[float],
    rgba: Rgba,
    mass: float,
    quat: list[float] | None = None,
) -> mujoco.MjsGeom:
    geom = body.add_geom(name=name, type=kind, size=size, pos=pos, rgba=list(rgba), mass=mass)
    geom.condim = 4
    geom.friction = [1.2, 0.01, 0.001]
    if quat is not None:
        geom.quat = quat
    return geom


def _ring(
    body: mujoco.MjsBody,
    name: str,
    *,
    radius: float,
    wall: float,
    height: float,
    rgba: Rgba,
    mass: float,
    segments: int = 16,
) -> None:
    """A cylindrical wall of `segments` boxes (bowls, covers, mugs)."""
    half_chord = radius * math.tan(math.pi / segments) + wall / 2
    for i in range(segments):
        angle = 2 * math.pi * i / segments
        pos = [radius * math.cos(angle), radius * math.sin(angle), height / 2]
        quat = [math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)]
        _geom(
            body,
            f"{name}/wall{i}",
            mujoco.mjtGeom.mjGEOM_BOX,
            size=[wall / 2, half_chord, height / 2],
            pos=pos,
            rgba=rgba,
            mass=mass / segments,
            quat=quat,
        )


def _carrot(body: mujoco.MjsBody, name: str, s: float, rgba: Rgba, mass: float) -> None:
    # A capsule lying along x: radius 16 mm, 92 mm long (thick enough for the Panda's
    # fingertip pads to close below its equator without touching the table).
    _geom(
        body,
        f"{name}/body",
        mujoco.mjtGeom.mjGEOM_CAPSULE,
        size=[0.016 * s, 0.03 * s, 0],
        pos=[0, 0, 0.016 * s],
        rgba=rgba,
        mass=mass,
        quat=[math.sqrt(0.5), 0, math.sqrt(0.5), 0],
    ).condim = 6
    # condim 6 adds rolling friction: a real carrot does not roll away at the slightest touch.


def _box_item(half: tuple[float, float, float]) -> Callable[[mujoco.MjsBody, str, float, Rgba, float], None]:
    def build(body: mujoco.MjsBody, name: str, s: float, rgba: Rgba, mass: float) -> None:
        hx, hy, hz = (h * s for h in half)
        _geom(body, f"{name}/body", mujoco.mjtGeom.mjGEOM_BOX, size=[hx, hy, hz], pos=[0, 0, hz], rgba=rgba, mass=mass)

    return build


def _cylinder(radius: float, half_height: float) -> Callable[[mujoco.MjsBody, str, float, Rgba, float], None]:
    def build(body: mujoco.MjsBody, name: str, s: float, rgba: Rgba, mass: float) -> None:
        _geom(
            body,
            f"{name}/body",
            mujoco.mjtGeom.mjGEOM_CYLINDER,
            size=[radius * s, half_height * s, 0],
            pos=[0, 0, half_height * s],
            rgba=rgba,
            mass=mass,
        )

    return build


def _bowl(body: mujoco.MjsBody, name: str, s: float, rgba: Rgba, mass: float) -> None:
    _geom(
        body,
        f"{name}/bottom",
        mujoco.mjtGeom.mjGEOM_CYLINDER,
        size=[0.065 * s, 0.004 * s, 0],
        pos=[0, 0, 0.004 * s],
        rgba=rgba,
        mass=mass / 3,
    )
    _ring(body, name, radius=0.068 * s, wall=0.006 * s, height=0.045 * s, rgba=rgba, mass=2 * mass / 3)


COVER_KNOB_TOP_M = 0.093  # height of the top of a cover's knob above its base (scale 1), metres


def _cover(body: mujoco.MjsBody, name: str, s: float, rgba: Rgba, mass: float) -> None:
    # A food cover (cloche): a wall ring with a lid, open at the bottom so it can hide an
    # item, and a knob on top by which a gripper lifts it.
    _ring(body, name, radius=0.058 * s, wall=0.005 * s, height=0.055 * s, rgba=rgba, mass=mass * 0.5)
    _geom(
        body,
        f"{name}/lid",
        mujoco.mjtGeom.mjGEOM_CYLINDER,
        size=[0.062 * s, 0.004 * s, 0],
        pos=[0, 0, 0.059 * s],
        rgba=rgba,
        mass=mass * 0.35,
    )
    _geom(
        body,
        f"{name}/knob",
        mujoco.mjtGeom.mjGEOM_BOX,
        size=[0.016 * s, 0.012 * s, 0.015 * s],
        pos=[0, 0, 0.078 * s],
        rgba=rgba,
        mass=mass * 0.15,
    )


def _open_box(half: tuple[float, float, float]) -> Callable[[mujoco.MjsBody, str, float, Rgba, float], None]:
    def build(body: mujoco.MjsBody, name: str, s: float, rgba: Rgba, mass: float) -> None:
        hx, hy, hz = (h * s for h in half)
        t = 0.004 * s
        box = mujoco.mjtGeom.mjGEOM_BOX
        _geom(body, f"{name}/bottom", box, size=[hx, hy, t], pos=[0, 0, t], rgba=rgba, mass=mass / 5)
        for side, (px, py, sx, sy) in {
            "wall_x+": (hx - t, 0, t, hy),
            "wall_x-": (-hx + t, 0, t, hy),
            "wall_y+": (0, hy - t, hx, t),
            "wall_y-": (0, -hy + t, hx, t),
        }.items():
            _geom(body, f"{name}/{side}", box, size=[sx, sy, hz], pos=[px, py, hz], rgba=rgba, mass=mass / 5)

    return build


OBJECT_TYPES: dict[str, ObjectType] = {
    "carrot": ObjectType(Role.ITEM, 0.05, 0.032, (1.0, 0.45, 0.05, 1), 0.04, True, _carrot),
    "meat": ObjectType(Role.ITEM, 0.05, 0.03, (0.7, 0.2, 0.2, 1), 0.08, True, _box_item((0.035, 0.025, 0.015))),
    "bread": ObjectType(Role.ITEM, 0.055, 0.04, (0.85, 0.65, 0.35, 1), 0.05, True, _box_item((0.04, 0.03, 0.02))),
    "cube": ObjectType(Role.ITEM, 0.035, 0.04, (0.2, 0.5, 0.9, 1), 0.05, True, _box_item((0.02, 0.02, 0.02))),
    "can": ObjectType(Role.ITEM, 0.04, 0.1, (0.8, 0.8, 0.85, 1), 0.1, True, _cylinder(0.03, 0.05)),
    "bowl": ObjectType(Role.CONTAINER, 0.08, 0.05, (0.95, 0.95, 0.9, 1), 0.3, True, _bowl),
    "plate": ObjectType(Role.SUPPORT, 0.095, 0.01, (0.9, 0.9, 0.95, 1), 0.3, True, _cylinder(0.09, 0.005)),
    "cover": ObjectType(Role.COVER, 0.07, 0.093, (1.0, 0.5, 0.75, 1), 0.05, True, _cover),
    "box": ObjectType(Role.CONTAINER, 0.16, 0.08, (0.6, 0.45, 0.3, 1), 0.5, True, _open_box((0.12, 0.09, 0.04))),
    "bag": ObjectType(Role.CONTAINER, 0.16, 0.1, (0.3, 0.5, 0.35, 1), 0.3, True, _open_box((0.11, 0.08, 0.05))),
    "block": ObjectType(Role.OBSTACLE, 0.045, 0.12, (0.25, 0.25, 0.3, 1), 1.0, False, _box_item((0.03, 0.03, 0.06))),
    "bottle": ObjectType(Role.OBSTACLE, 0.04, 0.2, (0.2, 0.6, 0.3, 1), 1.0, False, _cylinder(0.03, 0.1)),
    # a shelf's upright or a lamp: tall and thin, where the forearm and the elbow pass
    "post": ObjectType(Role.OBSTACLE, 0.03, 0.5, (0.45, 0.45, 0.5, 1), 3.0, False, _cylinder(0.02, 0.25)),
}
