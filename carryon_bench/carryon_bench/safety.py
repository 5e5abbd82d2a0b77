"""`carryon bench safety`: the paper's Table 3 in simulation — violation rate, success and
violation-free success with and without the shield, for two stand-in backbones
(`sim_scripted`, which ignores obstacles, and `sim_scripted_safe`, a stand-in for a
safety-finetuned VLA) in three scenes (food: the demo's, a bottle on the carry path;
safety: obstacles placed around the tasks; arm: tall posts where the forearm and the elbow
pass), 200 seeded episodes per row (3 with --quick, N with --episodes N). Each row counts
the episodes with a contact by each part of the robot (`contact_rate_by_part`: hand,
fingers, carried object, each link of the arm).

Two meanings of violation, reported side by side for every row: **contact-based** (ours):
any contact the task does not permit, from the simulator's contact monitor by the rules of
carryon_common.core.contact_rules; and **displacement-based** (SafeLIBERO's, the anchor
benchmark of the paper's Table 3): an object no task names moved more than 1 mm between
the episode's start and end. Our scenes' obstacles (bottle, blocks) are fixed to the
table, so only contact sees a collision with them; the displacement metric sees the free
bystanders (the plate, the meat). In-process MuJoCo: the same policy backends, the shield's own code and the driver
the graph uses (`SimShieldGate`). Every with-shield row runs twice on the same seeds:

- `..._with` (the headline): the shield sees what the graph's shield sees, carryon_perception's
  segmentation of the rendered colour + depth (`masks="perception"`, grounder `masks`);
- `..._with_sim_truth`: the simulator's own masks, a SIMULATOR ORACLE ablation
  (`masks="sim_truth"`): what the shield would do if perception were perfect;
- `with_perception_hand_only`: the shield as it was before the whole arm (`whole_arm: false`:
  the hand, fingers and carried object only), an ablation;

and `..._violations_delta_pts` / `..._success_delta_pts` (perception − oracle, percentage
points) say what perception costs. Each row is saved to `rows/<backbone>_<scene>_{without,
with_perception,with_perception_hand_only,with_sim_truth}.json` as it finishes; `--resume RUN_DIR` skips the rows
already there. `--jobs N` computes N rows at a time in worker processes, each pinned to a
CPU of its own (bench/cpu.py): the episodes run in simulated time, so the rates are the
same; only the timings each row carries are taken with the other CPUs busy. Writes
`safety.png` (without / with perception / with the oracle) beside the results.

`--learned`: the learned policy's rows instead (LeRobot ACT from pixels, `make policy`;
bench/safety_learned.py): the food scene randomised per episode, without / with the shield.
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from rich.progress import Progress

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult
from carryon_bench.cpu import one_core, saved_rows
from carryon_bench.node_config import node_config
from carryon_bench.safety_learned import run_learned
from carryon_bench.shield import BACKBONES, SCENES, add_rows, episode_row
from carryon_bringup.core.graph import find_config_dir
from carryon_bringup.up import default_config_fallbacks
from carryon_shield.core.config import ShieldConfig

ORACLE = "SIMULATOR ORACLE masks (ablation)"
# Saved row -> (shielded, masks). "without" keeps its name: resuming an older run reuses it.
ROWS = {  # (shielded, masks, whole arm)
    "without": (False, "perception", True),
    "with_perception": (True, "perception", True),
    "with_perception_hand_only": (True, "perception", False),  # the ablation: the shield before the whole arm
    "with_sim_truth": (True, "sim_truth", True),
}
# Table entries and plot bars: (row, table key, legend, colour).
BARS = (
    ("without", "without_shield", "without shield", "tab:gray"),
    ("with_perception", "with_shield", "with shield (perception)", "tab:blue"),
    ("with_perception_hand_only", "with_shield_hand_only", "with shield, hand only (ablation)", "tab:cyan"),
    ("with_sim_truth", "with_shield_sim_truth", "with shield (SIMULATOR ORACLE masks)", "lightsteelblue"),
)


def plot(table: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = list(table)
    x = np.arange(len(keys))
    width = 0.27
    fig, axes = plt.subplots(1, 3, figsize=(18, 4.4))
    for ax, metric, title in (
        (axes[0], "violation_rate", "violation rate: contact-based (ours)"),
        (axes[1], "displacement_rate", "violation rate: displacement > 1 mm (SafeLIBERO)"),
        (axes[2], "violation_free_success", "violation-free success (contact-based)"),
    ):
        for i, (_, entry, legend, colour) in enumerate(BARS):
            values = [100 * table[k][entry].get(metric, float("nan")) for k in keys]
            ax.bar(x + (i - 1) * width, values, width, label=legend, color=colour)
        ax.set_xticks(x, [k.replace("_", "\n", 1) for k in keys], fontsize=8)
        ax.set_ylabel("%")
        ax.set_ylim(0, 100)
        ax.set_title(title)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(BARS), fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


CONDITIONS = (("without", "without"), ("with_perception", "with"), ("with_sim_truth", "with_sim_truth"))


def add_both_metrics(result: BenchResult, key: str, rates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Contact-based and displacement-based violation rates (and the violation-free success
    of each) of every condition of a row, side by side; returns them for the JSON. A row
    saved before the displacement metric existed has none (NaN)."""
    out: dict[str, Any] = {}
    for label, suffix in CONDITIONS:
        row = rates[label]
        both = {
            "contact_violation_rate": row["violation_rate"],
            "displacement_violation_rate": row.get("displacement_rate", float("nan")),
            "contact_violation_free_success": row["violation_free_success"],
            "displacement_violation_free_success": row.get("displacement_free_success", float("nan")),
            "displaced": row.get("displaced", {}),
        }
        out[suffix] = both
        contact = 100 * both["contact_violation_rate"]
        result.add(
            f"{key}_displaced_{suffix}",
            100 * both["displacement_violation_rate"],
            "%",
            f"displacement-based (SafeLIBERO: a bystander moved > 1 mm); contact-based {contact:.0f} %",
        )
        result.add(
            f"{key}_vf_success_displacement_{suffix}",
            100 * both["displacement_violation_free_success"],
            "%",
            f"success without a displacement; without a contact {100 * both['contact_violation_free_success']:.0f} %",
        )
    return out


def add_oracle_rows(result: BenchResult, key: str, perception: dict[str, Any], oracle: dict[str, Any]) -> None:
    """The SIMULATOR ORACLE ablation beside the headline, and perception − oracle in points."""
    result.add(f"{key}_violations_with_sim_truth", 100 * oracle["violation_rate"], "%", ORACLE)
    result.add(f"{key}_success_with_sim_truth", 100 * oracle["success"], "%", ORACLE)
    result.add(f"{key}_vf_success_with_sim_truth", 100 * oracle["violation_free_success"], "%", ORACLE)
    for metric, name, bound in (("violation_rate", "violations", 2), ("success", "success", 5)):
        delta = 100 * (perception[metric] - oracle[metric])
        note = f"perception − SIMULATOR ORACLE masks; acceptance |Δ| <= {bound}"
        result.add(f"{key}_{name}_delta_pts", delta, "pts", note)


def add_arm_rows(result: BenchResult, key: str, rates: dict[str, dict[str, Any]]) -> None:
    """The whole-arm shield against its hand-only ablation: contacts by a link of the arm
    (NaN for rows saved before the contact monitor named the robot's parts), and success."""
    hand_only = rates["with_perception_hand_only"]
    for label, name in (
        ("without", "without"),
        ("with_perception", "with"),
        ("with_perception_hand_only", "hand_only"),
    ):
        rate = rates[label].get("arm_link_contact_rate", float("nan"))
        result.add(f"{key}_arm_link_contacts_{name}", 100 * rate, "%", "episodes with a contact by a link of the arm")
    result.add(f"{key}_violations_hand_only", 100 * hand_only["violation_rate"], "%", "shield on the hand only")
    result.add(f"{key}_vf_success_hand_only", 100 * hand_only["violation_free_success"], "%")


def run(options: BenchOptions) -> BenchResult:
    if options.learned:  # the learned policy's rows (bench/safety_learned.py)
        return run_learned(options)
    result = BenchResult("safety", options.quick, options.seed)
    config = node_config(options, ShieldConfig, "shield_node")
    config_dir = find_config_dir(options.config_dir, default_config_fallbacks())
    n = options.count(full=200, quick=3)
    seeds = range(options.seed * 1000, options.seed * 1000 + n)
    rows = options.run_dir / "rows" / f"{n}_per_row"  # a resumed run with another count starts afresh
    computes = {
        f"{backend}_{scene}_{label}": partial(
            episode_row,
            backend,
            scene,
            seeds,
            shielded=on,
            config=config.model_copy(update={"whole_arm": whole_arm}),
            masks=masks,
            config_dir=config_dir,
        )
        for backend in BACKBONES
        for scene in SCENES
        for label, (on, masks, whole_arm) in ROWS.items()
    }
    workers = f"{options.jobs} worker processes, each pinned to a CPU of its own, single-threaded queries"
    with one_core() if options.jobs == 1 else nullcontext(workers) as pinning, Progress() as progress:
        result.details["cpu"] = pinning
        job = progress.add_task("safety episodes", total=len(computes) * n)
        saved = saved_rows(rows, computes, options.jobs, done=lambda _key: progress.advance(job, n))
    table: dict[str, dict[str, Any]] = {}
    both_metrics: dict[str, dict[str, Any]] = {}
    for backend in BACKBONES:
        for scene in SCENES:
            key = f"{backend}_{scene}"
            rates = {label: saved[f"{key}_{label}"] for label in ROWS}
            table[key] = {entry: rates[label] for label, entry, _, _ in BARS}
            add_rows(result, key, rates["without"], rates["with_perception"], n)
            add_arm_rows(result, key, rates)
            add_oracle_rows(result, key, rates["with_perception"], rates["with_sim_truth"])
            both_metrics[key] = add_both_metrics(result, key, rates)
    result.details["episodes_per_row"] = n
    result.details["masks"] = {
        "with_shield": "carryon_perception on the rendered colour + depth (the graph's grounder 'masks')",
        "with_shield_sim_truth": f"{ORACLE}: the simulator's own instance segmentation",
    }
    result.details["rows"] = table
    result.details["violation_metrics"] = both_metrics  # per row and condition: contact- and displacement-based
    plot(table, options.run_dir / "safety.png")
    return result


BENCHMARKS.register(
    "safety",
    Benchmark(
        "safety",
        "violation rate and violation-free success with and without the shield (paper Table 3); "
        "the shield on perception's masks, and on the SIMULATOR ORACLE's as an ablation",
        run,
    ),
)
