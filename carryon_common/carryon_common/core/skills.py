"""The skill library (config/skills/library.yaml): the instructions the frozen VLA knows.

The planner copies instructions verbatim from it; the policy node refuses any other.
How the simulation stand-in plays each instruction is the harness's business
(carryon_sim.harness.stand_in, config/sim/stand_in_scripts.yaml), not the library's.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from carryon_common.core.config import config_path, format_validation_error, read_yaml
from carryon_common.core.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class VlaSkill(_Strict):
    """One instruction the VLA follows. `objects`: the objects it acts on (what it moves,
    then where to), which the planner counts as known names."""

    instruction: str = Field(min_length=1, max_length=200)
    description: str = ""
    objects: tuple[str, ...] = ()


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
