"""Named regions on the table: where the planner's observe looks and which region
perception reports an object in. One file per profile (`locations_file`:
config/planner/locations.yaml in simulation, the robot's own file on a robot), so neither
reads a simulator file::

    locations:
      kitchen_counter: {center: [0.55, 0.3], size: [0.3, 0.25], description: where food is kept}

`center`: centre of the region on the table, metres, world x/y; `size`: its extent in x
and y, metres.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from carryon_common.core.config import load_yaml_model, under_config_dir


class Location(BaseModel):
    """One named region on the table (world frame, metres)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    center: tuple[float, float] = Field(description="Centre of the region on the table, metres, world x/y.")
    size: tuple[float, float] = Field(description="Extent of the region in x and y, metres.")
    description: str = ""


class _LocationsFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    locations: dict[str, Location]


def locations_path(configured: str = "") -> Path:
    """`configured` (absolute, or relative to the config folder), else `<config folder>/planner/locations.yaml`."""
    return under_config_dir(configured, "planner", "locations.yaml")


def load_locations(path: Path) -> dict[str, Location]:
    """Location name -> region; ConfigError names the file and the key."""
    return dict(load_yaml_model(_LocationsFile, path).locations)


def region_of(xy: tuple[float, float], locations: dict[str, Location]) -> str:
    """The name of the first location whose rectangle holds the point (world x, y, metres), or ''."""
    for name, where in locations.items():
        if all(abs(xy[i] - where.center[i]) <= where.size[i] / 2 for i in (0, 1)):
            return name
    return ""
