from __future__ import annotations

import pytest
from pydantic import ValidationError

from carryon_sim import convert
from carryon_sim.core.config import SimConfig
from carryon_sim.core.types import ObjectTruth


def test_object_state_round_trips_through_message() -> None:
    obj = ObjectTruth("carrot", (0.4, -0.1, 0.82), (1.0, 0.0, 0.0, 0.0), "kitchen_counter", grasped=True)
    assert convert.object_from_msg(convert.object_to_msg(obj)) == obj


def test_camera_size_is_bounded() -> None:
    with pytest.raises(ValidationError, match="camera_width"):
        SimConfig(camera_width=8)
