"""Shared plumbing of the CarryOn nodes: config classes, registries, names, node base."""

__version__ = "0.1.0"
