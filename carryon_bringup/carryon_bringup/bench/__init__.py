"""Benchmarks behind `carryon bench NAME`. Importing this package registers them all."""

from carryon_bringup.bench import faults as _faults  # noqa: F401  (registers "faults")
from carryon_bringup.bench import graph as _graph  # noqa: F401  (registers "graph")
from carryon_bringup.bench import hosts as _hosts  # noqa: F401  (registers "hosts")
from carryon_bringup.bench import judge as _judge  # noqa: F401  (registers "judge")
from carryon_bringup.bench import latency as _latency  # noqa: F401  (registers "latency")
from carryon_bringup.bench import learned as _learned  # noqa: F401  (registers "learned")
from carryon_bringup.bench import memory as _memory  # noqa: F401  (registers "memory")
from carryon_bringup.bench import perception as _perception  # noqa: F401  (registers "perception")
from carryon_bringup.bench import personalization as _personalization  # noqa: F401  (registers it)
from carryon_bringup.bench import policy as _policy  # noqa: F401  (registers "policy")
from carryon_bringup.bench import recovery as _recovery  # noqa: F401  (registers "recovery")
from carryon_bringup.bench import safety as _safety  # noqa: F401  (registers "safety")
from carryon_bringup.bench import shield as _shield  # noqa: F401  (registers "shield")
from carryon_bringup.bench import sim as _sim  # noqa: F401  (registers "sim")
from carryon_bringup.core.bench import BENCHMARKS

__all__ = ["BENCHMARKS"]
