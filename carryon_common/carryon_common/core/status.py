"""Node health as plain data: what a node can do and whether it is ready."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class ServiceStatus(enum.IntEnum):
    """Mirrors the STATUS_* result codes every CarryOn service response carries."""

    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    UNAVAILABLE = 3
    NOT_IMPLEMENTED = 4
    READ_ONLY = 5
    INTERNAL_ERROR = 6
    UNAUTHORIZED = 7

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


class NodeState(enum.IntEnum):
    """Mirrors the STATE_* constants of carryon_interfaces/msg/NodeStatus."""

    STARTING = 0
    READY = 1
    DEGRADED = 2
    ERROR = 3


@dataclass(frozen=True)
class Capability:
    """One thing a node offers. `implemented=False` marks scaffolding that only says so."""

    name: str
    implemented: bool
    detail: str


def planned(name: str, issue: int, what: str) -> Capability:
    """A capability that is not implemented yet and arrives with GitHub-style issue `issue`."""
    return Capability(name=name, implemented=False, detail=f"not implemented yet (issue #{issue}): {what}")


def implemented(name: str, what: str) -> Capability:
    return Capability(name=name, implemented=True, detail=what)


@dataclass(frozen=True)
class NodeHealth:
    """A node's answer to a readiness check (core form of NodeStatus)."""

    node_name: str
    pid: int
    state: NodeState
    message: str
    uptime_s: float
    version: str
    backends: tuple[str, ...] = ()
    profile: str = ""  # the graph.yaml profile it was started in ("" outside the launchers)
    capabilities: tuple[Capability, ...] = field(default_factory=tuple)

    @property
    def ready(self) -> bool:
        return self.state in (NodeState.READY, NodeState.DEGRADED)

    @property
    def missing(self) -> tuple[Capability, ...]:
        """Capabilities that are not implemented yet."""
        return tuple(c for c in self.capabilities if not c.implemented)
