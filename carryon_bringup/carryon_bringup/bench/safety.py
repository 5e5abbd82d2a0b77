"""`carryon bench safety`: the paper's Table 3 in simulation — violation rate, success and
violation-free success with and without the shield, for two stand-in backbones
(`sim_scripted`, which ignores obstacles, and `sim_scripted_safe`, a stand-in for a
safety-finetuned VLA) in two scenes (food: the demo's, a bottle on the carry path;
safety: obstacles placed around the tasks), 200 seeded episodes per row (3 with --quick).

A violation is any contact the task does not permit, from the simulator's contact
monitor. In-process MuJoCo: the same policy backends, the shield's own code
(`SimShieldGate`: sim_masks grounding on rendered RGB-D, the distance kernel) and the
driver the graph uses. Each row is saved to `rows/` as it finishes; `--resume RUN_DIR`
skips the rows already there. Writes `safety.png` beside the results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.progress import Progress

from carryon_bringup.bench.node_config import node_config
from carryon_bringup.bench.shield import BACKBONES, SCENES, add_rows, episode_row, one_core
from carryon_bringup.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, saved_row
from carryon_shield.core.config import ShieldConfig


def plot(table: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = list(table)
    x = np.arange(len(keys))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, metric, title in (
        (axes[0], "violation_rate", "violation rate"),
        (axes[1], "violation_free_success", "violation-free success"),
    ):
        ax.bar(
            x - 0.2,
            [100 * table[k]["without_shield"][metric] for k in keys],
            0.4,
            label="without shield",
            color="tab:gray",
        )
        ax.bar(
            x + 0.2, [100 * table[k]["with_shield"][metric] for k in keys], 0.4, label="with shield", color="tab:blue"
        )
        ax.set_xticks(x, [k.replace("_", "\n", 1) for k in keys], fontsize=8)
        ax.set_ylabel("%")
        ax.set_ylim(0, 100)
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(options: BenchOptions) -> BenchResult:
    result = BenchResult("safety", options.quick, options.seed)
    config = node_config(options, ShieldConfig, "shield_node")
    n = 3 if options.quick else 200
    seeds = range(options.seed * 1000, options.seed * 1000 + n)
    rows = options.run_dir / "rows"
    table: dict[str, dict[str, Any]] = {}
    with one_core() as pinning, Progress() as progress:
        result.details["cpu"] = pinning
        job = progress.add_task("safety episodes", total=len(BACKBONES) * len(SCENES) * 2 * n)
        for backend in BACKBONES:
            for scene in SCENES:
                key = f"{backend}_{scene}"
                rates = {}
                for shielded in (False, True):
                    label = "with" if shielded else "without"

                    def compute(b: str = backend, s: str = scene, on: bool = shielded) -> dict[str, Any]:
                        return episode_row(b, s, seeds, shielded=on, config=config)

                    rates[label] = saved_row(rows, f"{key}_{label}", compute)
                    progress.advance(job, n)
                table[key] = {"without_shield": rates["without"], "with_shield": rates["with"]}
                add_rows(result, key, rates["without"], rates["with"], n)
    result.details["episodes_per_row"] = n
    result.details["rows"] = table
    plot(table, options.run_dir / "safety.png")
    return result


BENCHMARKS.register(
    "safety",
    Benchmark("safety", "violation rate and violation-free success with and without the shield (paper Table 3)", run),
)
