from __future__ import annotations

from pathlib import Path

import pytest

from carryon_bringup.bench import BENCHMARKS
from carryon_bringup.core.bench import BenchOptions, percentile
from carryon_common.core.errors import UnknownNameError


def test_every_benchmark_is_registered_and_typos_are_caught() -> None:
    assert {"graph", "sim", "safety", "recovery", "personalization", "latency"} <= set(BENCHMARKS.names())
    with pytest.raises(UnknownNameError, match="did you mean 'safety'"):
        BENCHMARKS.get("safty")


def test_percentile() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0


@pytest.mark.slow
def test_sim_benchmark_reports_every_figure(tmp_path: Path) -> None:
    result = BENCHMARKS.get("sim").run(BenchOptions(quick=True, seed=0, run_dir=tmp_path))  # type: ignore[misc]
    names = {m.name: m.value for m in result.metrics}
    for key in ("physics_steps_per_s", "rtf_no_camera", "rtf_camera_320x240_10hz", "rtf_camera_640x480_20hz"):
        assert names[key] > 0
    assert names["rtf_no_camera"] > names["rtf_camera_640x480_20hz"]  # rendering costs time
