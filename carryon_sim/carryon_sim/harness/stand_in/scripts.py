"""The stand-in's scripts (config/sim/stand_in_scripts.yaml): the motion it plays for
each instruction of the skill library. Simulation only: the skill library itself
(carryon_common.core.skills) knows nothing of them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from carryon_common.core.config import config_path, format_validation_error, read_yaml
from carryon_common.core.errors import ConfigError
from carryon_common.core.registry import unknown_name_message
from carryon_common.core.skills import SkillLibrary, load_skill_library, skills_path


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


class _ScriptsFile(_Strict):
    scripts: dict[str, Script]


def stand_in_scripts_path(configured: str = "") -> Path:
    """`configured`, else `<$CARRYON_CONFIG_DIR or ./config>/sim/stand_in_scripts.yaml`."""
    return config_path(configured, "sim", "stand_in_scripts.yaml")


def load_stand_in_scripts(path: Path, library: SkillLibrary) -> dict[str, Script]:
    """Instruction -> script, in the library's order. Every script must name an instruction
    of `library` (errors name the file and suggest the closest instruction); a library
    instruction without a script is left out, so the stand-in refuses it when asked."""
    try:
        scripts = _ScriptsFile.model_validate(read_yaml(path)).scripts
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, {}, str(path))) from None
    for instruction in scripts:
        if library.find(instruction) is None or instruction != instruction.strip():
            message = unknown_name_message("instruction", instruction, library.instructions)
            raise ConfigError(f"{path}: a script for an instruction the skill library does not have: {message}")
    return {i: scripts[i] for i in library.instructions if i in scripts}


def stand_in_script(instruction: str, scripts_file: str = "", skills_file: str = "") -> Script:
    """The script of one instruction, from the default (or given) files (benchmarks, tests)."""
    library = load_skill_library(skills_path(skills_file))
    scripts = load_stand_in_scripts(stand_in_scripts_path(scripts_file), library)
    script = scripts.get(instruction.strip())
    if script is None:
        raise ConfigError(unknown_name_message("instruction", instruction, scripts))
    return script
