"""The graph description (config/graph.yaml) shared by `carryon up` and `ros2 launch`.

Both ways of starting CarryOn call `GraphSpec.launches(profile, only)` and start
exactly the `NodeLaunch` entries it returns, so they cannot drift apart.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from carryon_common.core.config import (
    CONFIG_DIR_ENV,
    NodeConfig,
    format_validation_error,
    load_node_config,
    read_yaml,
)
from carryon_common.core.errors import ConfigError, UnknownNameError
from carryon_common.core.names import PROFILE_ENV
from carryon_common.core.registry import unknown_name_message

GRAPH_FILE = "graph.yaml"


class RestartPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_restarts: int = Field(0, ge=0, description="Restarts after an unexpected exit before the graph stops.")
    delay_s: float = Field(1.0, ge=0.0, description="Wait before a restart, seconds.")


class NodeEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    package: str = Field(description="ROS package that installs the executable.")
    executable: str = Field(description="Executable in lib/<package>/ (a console script).")
    config_class: str = Field(description="module:Class of the node's NodeConfig, used to validate params.")
    params: tuple[str, ...] = Field((), description="Parameter files, relative to the config folder.")
    restart: RestartPolicy = RestartPolicy()
    nice: int = Field(
        0,
        ge=0,
        le=19,
        description="Scheduling niceness of the process (`nice -n`): heavy work that may wait (perception, "
        "the judge) runs behind the control path (driver, policy, shield) on a small machine.",
    )
    others_nice: int = Field(
        0,
        ge=0,
        le=19,
        description="While this node is started, every other node of the graph runs this much nicer (its "
        "`nice` plus this, at most 19; their shares among themselves keep their ratios): the offline model "
        "server, which a request waits on while the arm holds still, gets the CPU on a small machine "
        "without the privilege a negative niceness needs.",
    )
    realtime_priority: int = Field(
        0,
        ge=0,
        le=99,
        description="SCHED_FIFO priority of the node's threads (set before ROS starts: its executor, its "
        "workers and the DDS threads that deliver its messages), 0 = ordinary scheduling: the shield's "
        "release of a chunk does not wait behind perception and the simulator. Only for a node whose work "
        "is small. Needs root, CAP_SYS_NICE or an rtprio limit; without it the node runs ordinary and "
        "says so (carryon_common.scheduling).",
    )
    when: str = Field(
        "",
        pattern=r"^$|^[a-z_]+\.[a-z_]+=\S+$",
        description="`node.parameter=value`: start this node only when that node of the profile starts with that "
        "value (llm_server_node when planner_node.llm_backend=local); '' = always.",
    )


class Profile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    description: str
    nodes: tuple[str, ...]
    common_params: tuple[str, ...] = Field(
        (), description="Parameter files given to every node of this profile (after the node's own)."
    )
    params: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="Extra parameter files per node for this profile (applied last)."
    )
    keys: Literal["per_run", "installed"] = Field(
        "per_run",
        description="Where the nodes' keys come from (carryon_bringup/core/run_keys.py): 'per_run' = made anew "
        "for each run in its folder; 'installed' = made once on this PC by `carryon keys init`, and a missing "
        "one stops the start.",
    )


class GraphFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    default_profile: str
    nodes: dict[str, NodeEntry]
    profiles: dict[str, Profile]

    @model_validator(mode="after")
    def _profiles_name_known_nodes(self) -> GraphFile:
        if self.default_profile not in self.profiles:
            raise ValueError(f"default_profile: {unknown_name_message('profile', self.default_profile, self.profiles)}")
        for profile_name, profile in self.profiles.items():
            for name in (*profile.nodes, *profile.params):
                if name not in self.nodes:
                    raise ValueError(f"profile {profile_name!r}: {unknown_name_message('node', name, self.nodes)}")
        for name, entry in self.nodes.items():
            target = entry.when.partition(".")[0]
            if entry.when and target not in self.nodes:
                raise ValueError(f"nodes.{name}.when: {unknown_name_message('node', target, self.nodes)}")
        return self


@dataclass(frozen=True)
class NodeLaunch:
    """One node process to start: everything both launchers need, with absolute paths."""

    name: str
    package: str
    executable: str
    namespace: str
    config_class: str
    params_files: tuple[Path, ...]
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    nice: int = 0  # `nice -n` of the process (0: as the launcher)
    realtime_priority: int = 0  # SCHED_FIFO priority of the node's threads (0: ordinary)
    when: str = ""  # `node.parameter=value` the node is started for ('' = always; `GraphSpec.needed`)

    def load_config(self, overrides: Mapping[str, Any] | None = None) -> NodeConfig:
        """Validate this node's parameter files (plus overrides) with its config class."""
        return load_node_config(
            resolve_config_class(self.config_class), self.params_files, self.name, self.namespace, overrides
        )


def resolve_config_class(path: str) -> type[NodeConfig]:
    """Import `module:Class` and check it is a NodeConfig."""
    module_name, _, class_name = path.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"config_class {path!r}: cannot import: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, NodeConfig)):
        raise ConfigError(f"config_class {path!r} is not a NodeConfig")
    return cls


@dataclass(frozen=True)
class GraphSpec:
    """config/graph.yaml, validated, with the folder it came from."""

    config_dir: Path
    data: GraphFile

    @classmethod
    def load(cls, config_dir: Path) -> GraphSpec:
        path = config_dir / GRAPH_FILE
        raw = read_yaml(path)
        try:
            data = GraphFile.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, {}, str(path))) from None
        spec = cls(config_dir.resolve(), data)
        for name, entry in data.nodes.items():
            for rel in entry.params:
                spec._check_file(rel, f"{path}: nodes.{name}.params")
        for pname, profile in data.profiles.items():
            for rel in profile.common_params:
                spec._check_file(rel, f"{path}: profiles.{pname}.common_params")
            for node, files in profile.params.items():
                for rel in files:
                    spec._check_file(rel, f"{path}: profiles.{pname}.params.{node}")
        return spec

    def _check_file(self, rel: str, where: str) -> None:
        if not (self.config_dir / rel).is_file():
            raise ConfigError(f"{where}: parameter file {rel!r} does not exist in {self.config_dir}")

    @property
    def namespace(self) -> str:
        return self.data.namespace.strip("/")

    @property
    def profiles(self) -> list[str]:
        return sorted(self.data.profiles)

    def resolve_profile(self, name: str | None) -> str:
        """The profile to use: `name`, else $CARRYON_PROFILE, else graph.yaml's default_profile."""
        return name or os.environ.get(PROFILE_ENV) or self.data.default_profile

    def running_profile(self, running: Iterable[str]) -> str | None:
        """The profile whose nodes `running` (node names seen on the graph) matches best: the
        most of its nodes up, then the fewest missing; None when nothing runs or two tie."""
        up = set(running)
        scores = sorted(
            ((len(up & set(p.nodes)), -len(set(p.nodes) - up), name) for name, p in self.data.profiles.items()),
            reverse=True,
        )
        if not scores or scores[0][0] == 0 or (len(scores) > 1 and scores[0][:2] == scores[1][:2]):
            return None
        return scores[0][2]

    def profile(self, name: str) -> Profile:
        if name not in self.data.profiles:
            raise UnknownNameError(unknown_name_message("profile", name, self.data.profiles))
        return self.data.profiles[name]

    def config_classes(self, profile: str) -> dict[str, type[NodeConfig]]:
        """node -> config class, for every node of `profile` (started or not)."""
        return {name: resolve_config_class(self.data.nodes[name].config_class) for name in self.profile(profile).nodes}

    def launches(self, profile: str, only: Sequence[str] | None = None) -> list[NodeLaunch]:
        """The processes of `profile` in start order, restricted to `only` when given."""
        prof = self.profile(profile)
        selected = list(prof.nodes)
        if only:
            unknown = [n for n in only if n not in prof.nodes]
            if unknown:
                raise UnknownNameError(
                    "; ".join(unknown_name_message(f"node in profile {profile!r}", n, prof.nodes) for n in unknown)
                )
            selected = [n for n in prof.nodes if n in set(only)]
        out = []
        for name in selected:
            entry = self.data.nodes[name]
            files = (*entry.params, *prof.common_params, *prof.params.get(name, ()))
            out.append(
                NodeLaunch(
                    name=name,
                    package=entry.package,
                    executable=entry.executable,
                    namespace=self.namespace,
                    config_class=entry.config_class,
                    params_files=tuple(self.config_dir / f for f in files),
                    restart=entry.restart,
                    nice=entry.nice,
                    realtime_priority=entry.realtime_priority,
                    when=entry.when,
                )
            )
        return out

    def conditional(self, name: str) -> bool:
        """True for a node started only for another node's setting (graph.yaml `when`)."""
        return bool(self.data.nodes[name].when) if name in self.data.nodes else False

    def needed(
        self, launches: Sequence[NodeLaunch], resolved: Mapping[str, Any], named: Iterable[str] = ()
    ) -> list[NodeLaunch]:
        """`launches` less the conditional ones whose condition does not hold: `resolved` maps
        node names to their validated configs; a condition on a node not started is false.
        Nodes in `named` (asked for by name, `--only`) always start. Where a started node has
        `others_nice` (the model server), the others run that much nicer."""
        out, always = [], set(named)
        for launch in launches:
            if launch.when and launch.name not in always:
                target, _, expected = launch.when.partition("=")
                node, _, param = target.partition(".")
                if node not in resolved or str(getattr(resolved[node], param, None)) != expected:
                    continue
            out.append(launch)
        lead = max((self.data.nodes[launch.name].others_nice for launch in out), default=0)
        if not lead:
            return out
        return [
            launch
            if self.data.nodes[launch.name].others_nice == lead
            else replace(launch, nice=min(19, launch.nice + lead))
            for launch in out
        ]


def find_config_dir(explicit: str | os.PathLike[str] | None, fallbacks: Iterable[Path] = ()) -> Path:
    """The config folder: `explicit`, else $CARRYON_CONFIG_DIR, else the first fallback holding graph.yaml."""
    tried: list[str] = []
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    elif os.environ.get(CONFIG_DIR_ENV):
        candidates.append(Path(os.environ[CONFIG_DIR_ENV]))
    else:
        candidates.extend(fallbacks)
    for candidate in candidates:
        if (candidate / GRAPH_FILE).is_file():
            return candidate.resolve()
        tried.append(str(candidate))
    raise ConfigError(
        f"no {GRAPH_FILE} found (tried: {', '.join(tried) or 'nothing'}); pass --config-dir or set {CONFIG_DIR_ENV}"
    )
