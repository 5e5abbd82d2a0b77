"""Scene files (config/scenes/<name>.yaml): named locations on the table and the objects
placed there, validated before anything is built.

Coordinates are metres in the `world` frame: z up, the table top at `TABLE_TOP_Z`, the
robot base at the origin facing +x. An object is placed by exactly one of
`pos: [x, y]`, `at: <location>` (its centre, plus an optional `offset: [dx, dy]`),
`under: <object>` (hidden beneath a cover) or `in: <object>` (inside a container).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from carryon_common.core.config import config_path, format_validation_error, one_of, read_yaml
from carryon_common.core.errors import ConfigError, UnknownNameError
from carryon_common.core.registry import unknown_name_message
from carryon_sim.core.objects import OBJECT_TYPES, ObjectType

TABLE_TOP_Z = 0.42  # metres; the robot base stands at the table's edge at this height
TABLE_X = (0.15, 0.95)  # table extent in x, metres
TABLE_Y = (-0.6, 0.6)  # table extent in y, metres

Vec2 = tuple[float, float]


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LocationSpec(_Strict):
    center: Vec2 = Field(description="Centre of the region on the table, metres, world x/y.")
    size: Vec2 = Field(description="Extent of the region in x and y, metres.")
    description: str = ""


class ObjectSpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=40)
    type: Annotated[str, one_of("object type", OBJECT_TYPES)]
    pos: Vec2 | None = None
    at: str | None = None
    offset: Vec2 = (0.0, 0.0)
    under: str | None = None
    in_: str | None = Field(None, alias="in")
    yaw_deg: float = 0.0
    scale: float = Field(1.0, gt=0.2, le=3.0)
    color: tuple[float, float, float] | None = None
    jitter_m: float = Field(0.0, ge=0.0, le=0.2, description="Uniform random shift of x and y per seed, metres.")
    offstage: bool = Field(False, description="Starts off the table, out of view, until a `place` perturbation.")

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _one_placement(self) -> ObjectSpec:
        given = [k for k, v in (("pos", self.pos), ("at", self.at), ("under", self.under), ("in", self.in_)) if v]
        if self.offstage and not given:
            return self
        if len(given) != 1:
            raise ValueError(f"give exactly one of pos, at, under, in (got {', '.join(given) or 'none'})")
        return self

    @property
    def kind(self) -> ObjectType:
        return OBJECT_TYPES[self.type]


PERTURBATIONS = ("drop", "displace", "relocate", "cover", "uncover", "slip", "place")


class PerturbationSpec(_Strict):
    """A perturbation, applied by the service or at `at_s` by a scene's schedule.

    drop: open the gripper; displace: move `object` by `by` (metres); relocate: move
    `object` to `location`; cover: put cover `object` over `item`; uncover: lift cover
    `object` off what it hides; slip: `object` becomes slippery for `duration_s`, so a
    grasp of it slips; place: put an `offstage` object (e.g. a new obstacle) at `location`.
    """

    at_s: float = Field(0.0, ge=0.0, description="Simulation time after reset, seconds (schedules only).")
    kind: Annotated[str, one_of("perturbation", PERTURBATIONS)]
    object: str = ""
    by: tuple[float, float, float] = (0.0, 0.0, 0.0)
    location: str = ""
    item: str = ""
    duration_s: float = Field(3.0, gt=0.0, description="How long a slip lasts, seconds.")

    @model_validator(mode="after")
    def _needs(self) -> PerturbationSpec:
        if self.kind != "drop" and not self.object:
            raise ValueError(f"{self.kind} needs an object")
        if self.kind in ("relocate", "place") and not self.location:
            raise ValueError(f"{self.kind} needs a location")
        if self.kind == "cover" and not self.item:
            raise ValueError("cover needs an item")
        return self


class SceneSpec(_Strict):
    name: str
    description: str
    locations: dict[str, LocationSpec] = Field(default_factory=dict)
    objects: list[ObjectSpec]
    perturbations: list[PerturbationSpec] = Field(default_factory=list, description="Scripted schedule.")


@dataclass(frozen=True)
class Placement:
    """Where an object starts: x, y, z of its base (metres, world) and yaw (radians)."""

    x: float
    y: float
    z: float
    yaw: float


@dataclass(frozen=True)
class Scene:
    """A validated scene file."""

    path: Path
    spec: SceneSpec

    @property
    def name(self) -> str:
        return self.spec.name

    def object(self, name: str) -> ObjectSpec:
        for obj in self.spec.objects:
            if obj.name == name:
                return obj
        raise UnknownNameError(unknown_name_message("object", name, [o.name for o in self.spec.objects]))

    def placements(self, seed: int) -> dict[str, Placement]:
        """Initial placement of every object for `seed` (the same seed, the same placement)."""
        rng = np.random.default_rng(seed)
        return _place(self.spec, rng, str(self.path))


def load_scene(path: Path) -> Scene:
    """Read and validate a scene file; errors name the file and the field."""
    raw = read_yaml(path)
    try:
        spec = SceneSpec.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, {}, str(path))) from None
    _check_references(spec, str(path))
    _place(spec, np.random.default_rng(0), str(path), jitter=False)  # overlap check at nominal positions
    return Scene(path, spec)


def scenes_dir(configured: str = "") -> Path:
    """The scene folder: `configured`, else `<$CARRYON_CONFIG_DIR or ./config>/scenes`."""
    return config_path(configured, "scenes")


def scene_path(scenes_dir: Path, name: str) -> Path:
    """`<scenes_dir>/<name>.yaml`; an unknown name lists the scenes that exist."""
    path = scenes_dir / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in scenes_dir.glob("*.yaml"))
        raise UnknownNameError(unknown_name_message(f"scene (in {scenes_dir})", name, known))
    return path


def _check_references(spec: SceneSpec, where: str) -> None:
    names = [o.name for o in spec.objects]
    for index, p in enumerate(spec.perturbations):
        field = f"{where}: perturbations.{index}"
        for key, value in (("object", p.object), ("item", p.item)):
            if value and value not in names:
                raise ConfigError(f"{field}.{key}: {unknown_name_message('object', value, names)}")
        if p.location and p.location not in spec.locations:
            raise ConfigError(f"{field}.location: {unknown_name_message('location', p.location, spec.locations)}")
    seen: set[str] = set()
    for index, obj in enumerate(spec.objects):
        field = f"{where}: objects.{index}"
        if obj.name in seen:
            raise ConfigError(f"{field}.name: duplicate object name {obj.name!r}")
        seen.add(obj.name)
        if obj.at and obj.at not in spec.locations:
            raise ConfigError(f"{field}.at: {unknown_name_message('location', obj.at, spec.locations)}")
        for key, target in (("under", obj.under), ("in", obj.in_)):
            if target is None:
                continue
            if target not in names or target == obj.name:
                raise ConfigError(f"{field}.{key}: {unknown_name_message('object', target, names)}")
            host = next(o for o in spec.objects if o.name == target)
            wanted = ("cover",) if key == "under" else ("container", "support")
            if host.kind.role not in wanted:
                raise ConfigError(
                    f"{field}.{key}: {target!r} is a {host.type} ({host.kind.role}), not a {' or '.join(wanted)}"
                )


JITTER_DRAWS = 100  # jittered placements drawn per seed until one has no overlap


def _place(spec: SceneSpec, rng: np.random.Generator, where: str, jitter: bool = True) -> dict[str, Placement]:
    """Resolve placements in dependency order, then reject overlaps and off-table objects.
    With jitter, a draw that overlaps is drawn again (from the same generator, so a seed
    still means one layout); the nominal layout was checked when the scene was loaded."""
    draws = JITTER_DRAWS if jitter and any(o.jitter_m > 0 for o in spec.objects) else 1
    for _ in range(draws - 1):
        out = _resolve(spec, rng, where)
        with contextlib.suppress(ConfigError):
            _check_overlaps(spec, out, where)
            return out
    out = _resolve(spec, rng if jitter else None, where)
    _check_overlaps(spec, out, where)  # the last draw's overlap is the one reported
    return out


def _resolve(spec: SceneSpec, rng: np.random.Generator | None, where: str) -> dict[str, Placement]:
    out: dict[str, Placement] = {}
    pending = list(spec.objects)
    while pending:
        progress = False
        for obj in list(pending):
            host = obj.under or obj.in_
            if host and host not in out:
                continue
            out[obj.name] = _placement(spec, obj, out, rng)
            pending.remove(obj)
            progress = True
        if not progress:
            cycle = ", ".join(o.name for o in pending)
            raise ConfigError(f"{where}: objects: placement cycle through under/in between {cycle}")
    return out


# Offstage objects wait on the floor behind the scene camera, 0.35 m apart, metres.
OFFSTAGE_X = 2.5
OFFSTAGE_Y0 = -1.0
OFFSTAGE_SPACING = 0.35


def _placement(spec: SceneSpec, obj: ObjectSpec, placed: Mapping[str, Placement], rng: Any) -> Placement:
    yaw = math.radians(obj.yaw_deg)
    if obj.offstage:
        index = [o.name for o in spec.objects if o.offstage].index(obj.name)
        return Placement(OFFSTAGE_X, OFFSTAGE_Y0 + OFFSTAGE_SPACING * index, 0.0, yaw)
    if obj.under or obj.in_:
        host = placed[obj.under or obj.in_ or ""]
        z = TABLE_TOP_Z if obj.under else host.z + 0.01
        return Placement(host.x, host.y, z, yaw)
    if obj.pos is not None:
        x, y = obj.pos
    else:
        location = spec.locations[obj.at or ""]
        x, y = location.center[0] + obj.offset[0], location.center[1] + obj.offset[1]
    if rng is not None and obj.jitter_m > 0:
        x, y = x + rng.uniform(-obj.jitter_m, obj.jitter_m), y + rng.uniform(-obj.jitter_m, obj.jitter_m)
    return Placement(float(x), float(y), TABLE_TOP_Z, yaw)


def _check_overlaps(spec: SceneSpec, placed: Mapping[str, Placement], where: str) -> None:
    objs = spec.objects
    for i, a in enumerate(objs):
        if a.offstage:
            continue
        pa = placed[a.name]
        r = a.kind.footprint_m * a.scale
        if not (TABLE_X[0] + r <= pa.x <= TABLE_X[1] - r and TABLE_Y[0] + r <= pa.y <= TABLE_Y[1] - r):
            raise ConfigError(f"{where}: objects.{i} ({a.name}): placed at ({pa.x:.3f}, {pa.y:.3f}), off the table")
        for j in range(i + 1, len(objs)):
            b = objs[j]
            if b.offstage or a.name in (b.under, b.in_) or b.name in (a.under, a.in_):
                continue  # hidden under a cover / inside a container on purpose
            pb = placed[b.name]
            gap = math.hypot(pa.x - pb.x, pa.y - pb.y) - r - b.kind.footprint_m * b.scale
            if gap < 0:
                raise ConfigError(
                    f"{where}: objects.{j} ({b.name}): overlaps objects.{i} ({a.name}) at its initial placement "
                    f"by {-gap * 100:.1f} cm"
                )
