"""Every benchmark behind `carryon bench NAME`: importing this module registers them all."""

from carryon_bench import faults as _faults  # noqa: F401  (registers "faults")
from carryon_bench import graph as _graph  # noqa: F401  (registers "graph")
from carryon_bench import hosts as _hosts  # noqa: F401  (registers "hosts")
from carryon_bench import judge as _judge  # noqa: F401  (registers "judge")
from carryon_bench import latency as _latency  # noqa: F401  (registers "latency")
from carryon_bench import learned as _learned  # noqa: F401  (registers "learned")
from carryon_bench import memory as _memory  # noqa: F401  (registers "memory")
from carryon_bench import perception as _perception  # noqa: F401  (registers "perception")
from carryon_bench import personalization as _personalization  # noqa: F401  (registers it)
from carryon_bench import policy as _policy  # noqa: F401  (registers "policy")
from carryon_bench import recovery as _recovery  # noqa: F401  (registers "recovery")
from carryon_bench import safety as _safety  # noqa: F401  (registers "safety")
from carryon_bench import shield as _shield  # noqa: F401  (registers "shield")
from carryon_bench import sim as _sim  # noqa: F401  (registers "sim")
from carryon_bench.core.bench import BENCHMARKS

__all__ = ["BENCHMARKS"]
