"""What the geometric judge knows about objects: role, footprint radius and height.

A small description per object name, read from a YAML file (`geometry_file`): on a
robot `config/judge/objects.yaml`; in simulation `config/judge/sim_objects.yaml`, the
simulator's objects written out for the judge (a harness test keeps it equal to the
simulator's catalogue, so the judge never reads a simulator file). Layout::

    objects:
      bowl: {role: container, radius_m: 0.08, height_m: 0.05}
      pink_cover: {role: cover, radius_m: 0.07, height_m: 0.093}
      carrot: {role: item, radius_m: 0.05, height_m: 0.032}

Roles: item, container, support, cover, obstacle. Metres.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from carryon_common.core.config import format_validation_error, read_yaml
from carryon_common.core.errors import ConfigError, UnknownNameError
from carryon_common.core.registry import unknown_name_message

Role = Literal["item", "container", "support", "cover", "obstacle"]


class ObjectShape(BaseModel):
    """role; radius_m: radius of the circle the object covers on the table; height_m:
    its height above its base (metres)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    radius_m: float = Field(gt=0.0, le=1.0)
    height_m: float = Field(gt=0.0, le=2.0)


class _ShapesFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    objects: dict[str, ObjectShape]


@dataclass(frozen=True)
class ShapeTable:
    """Object name -> shape; `source` says where it came from (for reasons and docs)."""

    shapes: dict[str, ObjectShape]
    source: str

    def get(self, name: str) -> ObjectShape:
        try:
            return self.shapes[name]
        except KeyError:
            raise UnknownNameError(unknown_name_message(f"object (in {self.source})", name, self.shapes)) from None

    def role(self, name: str) -> Role | None:
        shape = self.shapes.get(name)
        return None if shape is None else shape.role


def load_shapes(path: Path) -> ShapeTable:
    """Read an objects file (layout in the module docstring); errors name the file and key."""
    raw = read_yaml(path)
    try:
        parsed = _ShapesFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, {}, str(path))) from None
    return ShapeTable(dict(parsed.objects), str(path))
