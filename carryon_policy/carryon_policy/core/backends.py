"""Policy backends by name (the `backend` parameter of policy_node).

Two kinds, one namespace. The built-in backends live here (`openpi_remote`, `lerobot_local`);
their factories import heavy dependencies lazily (`lerobot_local` needs the optional LeRobot
extra, torch; `openpi_remote` only websockets + msgpack). Any installed package adds its own
by declaring a factory in the entry point group `carryon.policy_backends` of its setup.py:
the simulation harness registers its scripted stand-ins (`sim_scripted`, `sim_scripted_safe`)
that way, so this package never names the simulator, and a user registers their own VLA the
same way (docs/policy.md). Discovery reads installed package metadata only; a plugin's module
is imported when its backend is chosen, not before.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from carryon_common.core.errors import CarryOnError, UnknownNameError
from carryon_common.core.registry import unknown_name_message

if TYPE_CHECKING:
    from carryon_policy.core.action_mapping import Kinematics
    from carryon_policy.core.config import PolicyConfig
    from carryon_policy.core.policy import Policy
    from carryon_robot.core.kinematics import ArmKinematics

ENTRY_POINT_GROUP = "carryon.policy_backends"

# What every backend factory is, built in or registered by entry point: the node's config and
# the arm's forward kinematics (None unless the VLA's actions are joint targets) -> a Policy.
BackendFactory = Callable[["PolicyConfig", "Kinematics | None"], "Policy"]


class BackendPluginError(CarryOnError):
    """A backend registered by entry point cannot be used: its module failed to import, its
    object is not a factory, or its name is registered twice. The message names the backend,
    the entry point (`module:attribute`) and the package that declares it."""


@dataclass(frozen=True)
class Backend:
    name: str
    description: str
    make: BackendFactory


def installed_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The entry points of `ENTRY_POINT_GROUP` that installed packages declare (their metadata
    only: nothing is imported)."""
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def _origin(entry_point: importlib.metadata.EntryPoint) -> str:
    dist = entry_point.dist.name if entry_point.dist is not None else "an unnamed package"
    return f"entry point {entry_point.value!r} of {dist} (group {ENTRY_POINT_GROUP})"


class BackendRegistry:
    """The built-in backends plus those found under `ENTRY_POINT_GROUP` by `discover`
    (`installed_entry_points` unless a test passes its own). Discovery runs once, on the first
    lookup; a plugin's factory is loaded each time its backend is asked for by `get`."""

    def __init__(
        self,
        builtin: Iterable[Backend],
        discover: Callable[[], Iterable[importlib.metadata.EntryPoint]] = installed_entry_points,
    ) -> None:
        self.kind = "policy backend"
        self._builtin: dict[str, Backend] = {}
        for backend in builtin:
            if backend.name in self._builtin:
                raise ValueError(f"{self.kind} {backend.name!r} is already registered")
            self._builtin[backend.name] = backend
        self._discover = discover
        self._found: dict[str, list[importlib.metadata.EntryPoint]] | None = None

    def _plugins(self) -> dict[str, list[importlib.metadata.EntryPoint]]:
        if self._found is None:
            found: dict[str, list[importlib.metadata.EntryPoint]] = {}
            for entry_point in self._discover():
                found.setdefault(entry_point.name, []).append(entry_point)
            self._found = found
        return self._found

    def names(self) -> list[str]:
        return sorted(self._builtin.keys() | self._plugins().keys())

    def __contains__(self, name: object) -> bool:
        return name in self._builtin or name in self._plugins()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def get(self, name: str) -> Backend:
        """The backend called `name`; a plugin's module is imported now. Raises UnknownNameError
        (valid names listed, the closest suggested) or BackendPluginError."""
        plugins = self._plugins().get(name, [])
        if name in self._builtin and not plugins:
            return self._builtin[name]
        if not plugins:
            raise UnknownNameError(unknown_name_message(self.kind, name, self.names()))
        if len(plugins) > 1 or name in self._builtin:
            sources = ["built into carryon_policy"] * (name in self._builtin) + [_origin(p) for p in plugins]
            raise BackendPluginError(f"{self.kind} {name!r} is registered more than once: {'; '.join(sources)}")
        entry_point = plugins[0]
        try:
            factory = entry_point.load()
        except Exception as exc:  # any failure of a third-party import: re-raised, naming the plugin
            raise BackendPluginError(
                f"{self.kind} {name!r}: module {entry_point.module!r} failed to import "
                f"({type(exc).__name__}: {exc}); {_origin(entry_point)}"
            ) from exc
        if not callable(factory):
            raise BackendPluginError(
                f"{self.kind} {name!r}: {entry_point.value!r} is a {type(factory).__name__}, not a factory "
                f"(config, kinematics) -> Policy; {_origin(entry_point)}"
            )
        doc = (factory.__doc__ or "").strip()
        return Backend(name, doc.splitlines()[0] if doc else _origin(entry_point), factory)


def _openpi(config: PolicyConfig, kinematics: Kinematics | None) -> Policy:
    from carryon_policy.core.openpi_client import make_openpi_policy

    return make_openpi_policy(config, kinematics)


def _lerobot(config: PolicyConfig, kinematics: Kinematics | None) -> Policy:
    from carryon_policy.core.lerobot_policy import make_lerobot_policy

    return make_lerobot_policy(config, kinematics)


BACKENDS = BackendRegistry(
    (
        Backend("openpi_remote", "a pi0 / pi0.5 (or any openpi) policy server over websocket + msgpack", _openpi),
        Backend("lerobot_local", "a LeRobot policy from a local folder (optional extra: torch, lerobot)", _lerobot),
    )
)


def kinematics_for(config: PolicyConfig) -> ArmKinematics | None:
    """The arm's forward kinematics (Pinocchio, from `robot_file`) when the VLA's actions are
    joint targets (vla_action_convention joint_*); None otherwise, or for the stand-ins."""
    if config.backend.startswith("sim_scripted") or not config.vla_action_convention.startswith("joint_"):
        return None
    from carryon_robot.core.kinematics import load_robot

    return load_robot(config.robot_file).kinematics()


def make_policy(config: PolicyConfig, kinematics: Kinematics | None = None) -> Policy:
    """The backend named by `config.backend`, built from `config` (with `kinematics_for(config)`
    unless `kinematics` is given)."""
    return BACKENDS.get(config.backend).make(config, kinematics if kinematics is not None else kinematics_for(config))
