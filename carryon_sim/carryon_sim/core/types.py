"""Ground truth of simulated objects as plain data."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectTruth:
    """position: metres in "world"; quaternion: (w, x, y, z), unit norm."""

    name: str
    position: tuple[float, float, float]
    quaternion: tuple[float, float, float, float]
    location: str = ""
    grasped: bool = False
    in_contact: bool = False
    inside: str = ""  # container / support it is in or on
    covered_by: str = ""  # cover hiding it
