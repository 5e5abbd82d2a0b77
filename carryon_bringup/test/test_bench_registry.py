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


def test_the_safety_benchmark_resumes_from_the_rows_it_saved(tmp_path: Path) -> None:
    """Rows already in the run folder are not run again (here: all of them), and the
    table, figures and plot come from them."""
    import json

    from carryon_bringup.bench.shield import BACKBONES, SCENES

    rows = tmp_path / "rows"
    rows.mkdir()
    for backend in BACKBONES:
        for scene in SCENES:
            for label, rate in (("without", 0.5), ("with", 0.1)):
                row = {"episodes": 3, "success": 0.9, "violation_rate": rate, "violation_free_success": 0.9 - rate,
                       "contacts": {}}  # fmt: skip
                (rows / f"{backend}_{scene}_{label}.json").write_text(json.dumps(row))
    result = BENCHMARKS.get("safety").run(BenchOptions(quick=True, seed=0, run_dir=tmp_path))  # type: ignore[misc]
    figures = {m.name: m.value for m in result.metrics}
    assert figures["sim_scripted_food_violations_without"] == 50 and figures["sim_scripted_food_violations_with"] == 10
    assert len(figures) == 6 * len(BACKBONES) * len(SCENES) and (tmp_path / "safety.png").stat().st_size > 0
    assert "| sim_scripted_safe_safety_vf_success_with | 80 | % |" in result.to_markdown()
