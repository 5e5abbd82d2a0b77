"""Exceptions shared by CarryOn packages."""

from __future__ import annotations


class CarryOnError(Exception):
    """Base class of every error CarryOn raises on purpose."""


class ConfigError(CarryOnError):
    """A configuration file or value is invalid.

    The message names the file, the key and the reason, e.g.
    `config/nodes/sim_node.yaml: control_rate_hz: Input should be greater than 0`.
    """


class UnknownNameError(CarryOnError, KeyError):
    """A name (backend, profile, node, benchmark) is not one of the valid ones."""

    def __str__(self) -> str:  # KeyError would wrap the message in quotes
        return str(self.args[0]) if self.args else ""


class InvalidMessage(ValueError):
    """A message (or a field of one) that must not be used: its text says which field and why,
    e.g. `steps[3].position.x: NaN`. Nodes refuse such a message and say so (issue 43)."""
