"""Configuration of sim_node."""

from __future__ import annotations

from pydantic import Field

from carryon_common.core.driver import DriverCommandConfig
from carryon_common.core.operator_auth import OperatorAuthConfig


class SimConfig(DriverCommandConfig, OperatorAuthConfig):
    scene: str = Field("food_serving", description="Scene file name under the scenes folder (without .yaml).")
    scenes_dir: str = Field(
        "", description="Folder of scene files ('' = <config dir>/scenes, the config dir from $CARRYON_CONFIG_DIR)."
    )
    seed: int = Field(0, ge=0, description="Seed for the scene's randomised parts.")
    control_rate_hz: float = Field(20.0, gt=0.0, le=1000.0, description="Rate at which chunk steps are executed, Hz.")
    camera_rate_hz: float = Field(10.0, gt=0.0, le=120.0, description="Rate of camera image publication, Hz.")
    camera_width: int = Field(256, ge=16, le=4096, description="Rendered image width, pixels.")
    camera_height: int = Field(256, ge=16, le=4096, description="Rendered image height, pixels.")
    real_time_factor: float = Field(
        1.0,
        ge=0.0,
        le=100.0,
        description=(
            "Simulated seconds per wall second, at most (on a stalled machine sim time waits; it never races to "
            "catch up); 0 = as fast as possible."
        ),
    )
    watchdog_s: float = Field(
        0.25, gt=0.0, description="Hold the arm still when no released command arrived for this long, seconds."
    )
