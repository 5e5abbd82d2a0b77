"""The versioned recovery skill library (paper §D.2): `<skills_dir>/<skill>/v<N>.yaml`.

A version is the base procedure plus the strategy and parameter revisions accumulated so
far, with its lineage (parent version) and the evidence each revision came from. Every
parameter carries its allowed range, so a revision (by reflection or by hand) outside it
is refused. Versions are never edited in place: a revision writes v<N+1> next to v<N>
(atomically, never over an existing file), so every attempt can name the exact version it
used and any two versions can be compared.

    skill: regrasp
    version: 2
    parent: 1
    procedure: [relocalize, grasp_candidates, approach, grasp, lift, check_holding,
                transport_standoff, check_holding, resume]
    strategy: {retries_with_renewed_perception: 0, candidate_order: [top_down, side]}
    parameters:
      grasp_height_m: {value: 0.03, min: 0.0, max: 0.12, description: ...}
    revisions:
      - {version: 2, kind: parameter, change: "grasp_height_m 0.01 -> 0.03", reason: ..., evidence: [...]}
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from carryon_common.core.config import format_validation_error, read_yaml
from carryon_common.core.errors import ConfigError

OPERATIONS = (
    "relocalize",
    "grasp_candidates",
    "nudge",
    "approach",
    "grasp",
    "lift",
    "check_holding",
    "transport_standoff",
    "resume",
)
_VERSION_FILE = re.compile(r"^v([1-9][0-9]*)\.yaml$")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Parameter(_Strict):
    value: float
    min: float
    max: float
    description: str = ""
    # The operations this parameter shapes: reflection's index from the operation an attempt
    # failed at to the parameters that may fix it.
    shapes: list[Literal[OPERATIONS]] = Field(default_factory=list)  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _in_range(self) -> Parameter:
        if not self.min <= self.value <= self.max:
            raise ValueError(f"value {self.value} is outside its allowed range [{self.min}, {self.max}]")
        return self


CandidateKind = Literal["top_down", "side"]


def _all_candidates() -> list[CandidateKind]:
    return ["top_down", "side"]


class Strategy(_Strict):
    """What a strategy revision may change: retries with renewed perception (0-3) and the
    order (and choice) of grasp candidate kinds."""

    retries_with_renewed_perception: int = Field(0, ge=0, le=3)
    candidate_order: list[CandidateKind] = Field(default_factory=_all_candidates, min_length=1, max_length=2)

    @model_validator(mode="after")
    def _unique(self) -> Strategy:
        if len(set(self.candidate_order)) != len(self.candidate_order):
            raise ValueError("candidate_order lists a kind twice")
        return self


class Revision(_Strict):
    version: int = Field(ge=2)
    kind: Literal["parameter", "strategy"]
    change: str
    reason: str
    evidence: list[str] = Field(default_factory=list)
    source: str = ""  # who proposed it: "reflection:<model>", "operator", ...


class SkillVersion(_Strict):
    skill: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    version: int = Field(ge=1)
    parent: int | None = None
    procedure: list[Literal[OPERATIONS]] = Field(min_length=1)  # type: ignore[valid-type]
    strategy: Strategy = Field(default_factory=Strategy)
    parameters: dict[str, Parameter]
    revisions: list[Revision] = Field(default_factory=list)

    @model_validator(mode="after")
    def _lineage(self) -> SkillVersion:
        if self.version == 1 and self.parent is not None:
            raise ValueError("version 1 has no parent")
        if self.version > 1 and self.parent != self.version - 1:
            raise ValueError(f"version {self.version} must name parent {self.version - 1}")
        return self

    def value(self, name: str) -> float:
        return self.parameters[name].value


class SkillLibrary:
    """The versions of every skill under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def skills(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and self.versions(p.name))

    def versions(self, skill: str) -> list[int]:
        folder = self.root / skill
        if not folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _VERSION_FILE.match(p.name)))

    def path(self, skill: str, version: int) -> Path:
        return self.root / skill / f"v{version}.yaml"

    def load(self, skill: str, version: int | None = None) -> SkillVersion:
        """A version (the newest when None). ConfigError names the file and the problem."""
        known = self.versions(skill)
        if not known:
            raise ConfigError(
                f"no recovery skill {skill!r} in {self.root} (known: {', '.join(self.skills()) or 'none'})"
            )
        wanted = known[-1] if version is None else version
        if wanted not in known:
            raise ConfigError(f"recovery skill {skill!r} has no version {wanted} (versions: {known})")
        path = self.path(skill, wanted)
        try:
            loaded = SkillVersion.model_validate(read_yaml(path))
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, {}, str(path))) from None
        if loaded.skill != skill or loaded.version != wanted:
            raise ConfigError(f"{path}: says skill {loaded.skill!r} version {loaded.version}")
        return loaded

    def write_next(self, current: SkillVersion, changes: dict[str, Any], revision: Revision) -> SkillVersion:
        """Write version current.version + 1 = `current` with `changes` (field -> new
        value, validated again) and `revision` appended. Refuses to overwrite."""
        data = current.model_dump(mode="json")
        data.update(changes)
        data["version"] = current.version + 1
        data["parent"] = current.version
        data["revisions"] = [*data["revisions"], revision.model_dump(mode="json")]
        try:
            new = SkillVersion.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, {}, f"{current.skill} v{current.version + 1}")) from None
        path = self.path(new.skill, new.version)
        if path.exists():
            raise ConfigError(f"{path} exists already: versions are never overwritten")
        text = f"# Recovery skill {new.skill}, version {new.version} (from v{current.version}; see revisions).\n"
        text += yaml.safe_dump(new.model_dump(mode="json"), sort_keys=False, allow_unicode=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".v", suffix=".tmp")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.link(temporary, path)  # fails if the version appeared meanwhile
        finally:
            Path(temporary).unlink()
        return new


def diff(old: SkillVersion, new: SkillVersion) -> list[str]:
    """What changed from `old` to `new`, one line each."""
    lines = []
    if old.procedure != new.procedure:
        lines.append(f"procedure: {old.procedure} -> {new.procedure}")
    for field, before in old.strategy.model_dump().items():
        after = getattr(new.strategy, field)
        if before != after:
            lines.append(f"strategy.{field}: {before} -> {after}")
    for name in sorted(set(old.parameters) | set(new.parameters)):
        a, b = old.parameters.get(name), new.parameters.get(name)
        if a is None or b is None:
            lines.append(f"parameter {name}: {'added' if a is None else 'removed'}")
        elif a.value != b.value or (a.min, a.max) != (b.min, b.max):
            lines.append(f"parameters.{name}: {a.value} -> {b.value}")
    lines += [f"revision v{r.version} ({r.kind}): {r.change} — {r.reason}" for r in new.revisions[len(old.revisions) :]]
    return lines
