"""Benchmark registry and result records (the plumbing behind `carryon bench`).

Every benchmark of every issue registers here, prints a table, and can write its
figures as JSON. Results are also saved under `runs/bench-<name>-<time>/`.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from carryon_common.core.registry import Registry


def saved_row(rows: Path, key: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`rows/<key>.json` when an earlier (interrupted) run left it, else `compute()` saved
    there as soon as it finishes: what makes `carryon bench --resume RUN_DIR` skip work."""
    path = rows / f"{key}.json"
    if path.is_file():
        cached: dict[str, Any] = json.loads(path.read_text())
        return cached
    row = compute()
    rows.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(row, indent=2) + "\n")
    tmp.replace(path)  # atomic: an interrupted write leaves no half row
    return row


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    unit: str
    note: str = ""


@dataclass(frozen=True)
class BenchOptions:
    quick: bool
    seed: int
    run_dir: Path
    sets: tuple[str, ...] = ()  # NODE.KEY=VALUE overrides of node configs (`--set`)
    config_dir: Path | None = None
    episodes: int | None = None  # `--episodes`: per row / per kind, instead of the benchmark's own count
    jobs: int = 1  # `--jobs`: rows computed at a time, in worker processes (benchmarks that support it)
    natural: bool = False  # `--natural` (recovery): the learned policy's own failures, nothing injected
    learned: bool = False  # `--learned` (safety): the learned policy's rows instead of the stand-ins'
    suites: tuple[str, ...] = ()  # `--suites` (personalization): suite sets or suites to run (empty: all)

    def count(self, full: int, quick: int) -> int:
        """Episodes to run: `--episodes` when given, else the benchmark's quick or full count."""
        return self.episodes if self.episodes is not None else (quick if self.quick else full)


@dataclass
class BenchResult:
    benchmark: str
    quick: bool
    seed: int
    metrics: list[Metric] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, value: float, unit: str, note: str = "") -> None:
        self.metrics.append(Metric(name, float(value), unit, note))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=False)

    def to_markdown(self) -> str:
        """The figures as a Markdown table (results.md beside results.json)."""
        lines = [
            f"# carryon bench {self.benchmark}{' --quick' if self.quick else ''} (seed {self.seed})",
            "",
            "| metric | value | unit | note |",
            "|---|---|---|---|",
        ]
        for m in self.metrics:
            note = m.note.replace("|", "/")
            lines.append(f"| {m.name} | {m.value:.4g} | {m.unit} | {note} |")
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json() + "\n")


@dataclass(frozen=True)
class Benchmark:
    """A named benchmark. `run` is None for benchmarks announced by a later issue."""

    name: str
    description: str
    run: Callable[[BenchOptions], BenchResult] | None
    issue: int | None = None


BENCHMARKS: Registry[Benchmark] = Registry("benchmark")


def free_port() -> int:
    """A loopback TCP port free now, for a server a benchmark starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q))
