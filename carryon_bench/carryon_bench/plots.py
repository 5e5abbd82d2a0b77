"""Charts the benchmarks write beside their results (matplotlib's Agg backend: no display)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path


def bar_chart(
    path: Path,
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    unit: str,
    ylim: tuple[float, float] | None = None,
) -> Path:
    """Grouped bars, one group per entry of `groups` and one bar per series, each labelled
    with its value (NaN: no bar, "n/a"). Returns `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    x = np.arange(len(groups))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(groups) + 2.0), 4.0))
    for k, (name, values) in enumerate(series.items()):
        offsets = x - 0.4 + width * (k + 0.5)
        heights = [0.0 if math.isnan(v) else v for v in values]
        bars = ax.bar(offsets, heights, width, label=name)
        ax.bar_label(bars, labels=["n/a" if math.isnan(v) else f"{v:.3g}" for v in values], fontsize=7)
    ax.set_xticks(x, [g.replace("_", "\n") for g in groups], fontsize=8)
    ax.set_ylabel(unit)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_title(title, fontsize=10)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
