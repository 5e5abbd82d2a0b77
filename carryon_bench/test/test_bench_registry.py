from __future__ import annotations

import math
from pathlib import Path

import pytest

from carryon_bench.benchmarks import BENCHMARKS
from carryon_bench.core.bench import BenchOptions, percentile
from carryon_common.core.errors import UnknownNameError


def test_every_benchmark_is_registered_and_typos_are_caught() -> None:
    assert {"graph", "sim", "safety", "recovery", "personalization", "latency"} <= set(BENCHMARKS.names())
    with pytest.raises(UnknownNameError, match="did you mean 'safety'"):
        BENCHMARKS.get("safty")


def test_the_episode_count_is_the_benchmarks_own_unless_given() -> None:
    options = BenchOptions(quick=False, seed=0, run_dir=Path("unused"))
    assert options.count(full=200, quick=3) == 200
    assert BenchOptions(quick=True, seed=0, run_dir=Path("unused")).count(full=200, quick=3) == 3
    assert BenchOptions(quick=True, seed=0, run_dir=Path("unused"), episodes=20).count(full=200, quick=3) == 20


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
    table, figures and plot come from them: without the shield, with it on perception's
    masks (the headline) and on the SIMULATOR ORACLE's (the ablation), and the difference."""
    import json

    from carryon_bench.shield import BACKBONES, SCENES

    rows = tmp_path / "rows" / "3_per_row"  # the quick count's rows
    rows.mkdir(parents=True)
    for backend in BACKBONES:
        for scene in SCENES:
            for label, rate, success in (("without", 0.5, 0.9), ("with_perception", 0.1, 0.85),
                                         ("with_perception_hand_only", 0.3, 0.8),
                                         ("with_sim_truth", 0.08, 0.95)):  # fmt: skip
                row = {"episodes": 3, "success": success, "violation_rate": rate,
                       "violation_free_success": success - rate, "contacts": {}}  # fmt: skip
                if scene == "arm":  # saved after the contact monitor named the robot's parts
                    row["arm_link_contact_rate"] = rate / 2
                if scene == "food":  # saved after the displacement metric existed (safety rows: before)
                    row |= {"displacement_rate": rate / 2, "displacement_free_success": success - rate / 2,
                            "displaced": {"plate": 1}}  # fmt: skip
                (rows / f"{backend}_{scene}_{label}.json").write_text(json.dumps(row))
    result = BENCHMARKS.get("safety").run(BenchOptions(quick=True, seed=0, run_dir=tmp_path))  # type: ignore[misc]
    figures = {m.name: m.value for m in result.metrics}
    assert figures["sim_scripted_food_violations_without"] == 50 and figures["sim_scripted_food_violations_with"] == 10
    assert figures["sim_scripted_food_violations_with_sim_truth"] == 8
    assert figures["sim_scripted_food_success_with"] == 85 and figures["sim_scripted_food_success_with_sim_truth"] == 95
    assert figures["sim_scripted_safe_safety_violations_delta_pts"] == pytest.approx(2.0)  # perception - oracle
    assert figures["sim_scripted_safe_safety_success_delta_pts"] == pytest.approx(-10.0)
    assert len(figures) == 22 * len(BACKBONES) * len(SCENES) and (tmp_path / "safety.png").stat().st_size > 0
    # the whole arm against the hand-only ablation
    assert figures["sim_scripted_arm_arm_link_contacts_without"] == 25
    assert figures["sim_scripted_arm_arm_link_contacts_hand_only"] == 15
    assert figures["sim_scripted_arm_vf_success_hand_only"] == pytest.approx(50)
    assert math.isnan(figures["sim_scripted_food_arm_link_contacts_with"])  # an older row: not counted
    # both meanings of violation, per row and condition: contact-based (ours), displacement-based (SafeLIBERO's)
    assert figures["sim_scripted_food_displaced_without"] == 25 and figures["sim_scripted_food_displaced_with"] == 5
    assert figures["sim_scripted_food_vf_success_displacement_with_sim_truth"] == pytest.approx(91)
    assert figures["sim_scripted_safety_displaced_with"] != figures["sim_scripted_safety_displaced_with"]  # NaN: older
    both = result.details["violation_metrics"]["sim_scripted_food"]["with"]
    assert (both["contact_violation_rate"], both["displacement_violation_rate"]) == (0.1, 0.05)
    markdown = result.to_markdown()
    assert "| sim_scripted_safe_safety_vf_success_with | 75 | % |" in markdown
    assert (
        "| sim_scripted_safe_safety_vf_success_with_sim_truth | 87 | % | SIMULATOR ORACLE masks (ablation) |"
        in markdown
    )
    table = result.details["rows"]["sim_scripted_food"]
    assert set(table) == {"without_shield", "with_shield", "with_shield_hand_only", "with_shield_sim_truth"}
