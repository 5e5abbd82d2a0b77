"""The skill library (config/skills/library.yaml): the instructions the frozen VLA knows.

The planner copies instructions verbatim from it; the policy node refuses any other.
Each entry may carry a `script`, read only by the simulation stand-in policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from carryon_common.core.config import config_path, format_validation_error, read_yaml
from carryon_common.core.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Script(_Strict):
    """How the stand-in plays an instruction. offset: (x, y) metres, world frame."""

    motion: Literal["pick_place", "lift_aside", "push"]
    object: str
    destination: str = ""
    offset: tuple[float, float] = (0.0, 0.0)

    @model_validator(mode="after")
    def _needs(self) -> Script:
        if self.motion == "pick_place" and not self.destination:
            raise ValueError("pick_place needs a destination")
        if self.motion in ("lift_aside", "push") and self.offset == (0.0, 0.0):
            raise ValueError(f"{self.motion} needs a non-zero offset")
        return self


class VlaSkill(_Strict):
    instruction: str = Field(min_length=1, max_length=200)
    description: str = ""
    script: Script | None = None


class SkillLibrary(_Strict):
    vla: list[VlaSkill]

    @model_validator(mode="after")
    def _unique(self) -> SkillLibrary:
        seen: set[str] = set()
        for skill in self.vla:
            if skill.instruction in seen:
                raise ValueError(f"instruction {skill.instruction!r} is listed twice")
            seen.add(skill.instruction)
        return self

    @property
    def instructions(self) -> tuple[str, ...]:
        return tuple(s.instruction for s in self.vla)

    def find(self, instruction: str) -> VlaSkill | None:
        """The skill with exactly this instruction (after trimming outer whitespace)."""
        wanted = instruction.strip()
        return next((s for s in self.vla if s.instruction == wanted), None)


def skills_path(configured: str = "") -> Path:
    """The library file: `configured`, else `<$CARRYON_CONFIG_DIR or ./config>/skills/library.yaml`."""
    return config_path(configured, "skills", "library.yaml")


def load_skill_library(path: Path) -> SkillLibrary:
    """Read and validate the library; errors name the file and the entry."""
    raw = read_yaml(path)
    try:
        return SkillLibrary.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, {}, str(path))) from None
