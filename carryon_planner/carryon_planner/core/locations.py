"""The named locations an observe subtask looks at: planner-side config, one file per
profile (`locations_file`: config/planner/locations.yaml in simulation, the robot's own
file on a robot), so the planner reads no simulator file::

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
