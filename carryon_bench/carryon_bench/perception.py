"""`carryon bench perception`: how well perception segments and labels what the cameras
see, against the simulator's truth, and how long it takes.

Frames (carryon_sim.harness.perception_frames): the food_serving and safety scenes over
5 seeds (about 210 frames; 1 seed, about 20, with --quick), along scripted episodes and in
set-ups (arm occluding objects, an object carried, carrot / cube in the bowl, the cover on
and lifted, an obstacle placed on the path). Each frame names its target (the object the
subtask acts on; none for the arm-occlusion set-ups) and what the gripper holds. Perception
gets RGB-D without the truth segmentation, the joint states (arm and fingers) and the gripper width; one
fresh perception per sequence (an episode, or one set-up frame). Metrics, per camera
(scene, wrist), computed in carryon_bench.perception_metrics:

- mask IoU: truth objects (not robot, not table) at least `min_size_m` large (largest
  extent, config/judge/sim_objects.yaml, else the truth points' extent) with >= `min_pixels` pixels;
  predicted instances are matched one to one to truth objects whose TYPE their label has
  (config/scenes/*.yaml: obstacle_1 and obstacle_3 are both blocks, either matches either;
  a type name is a label too), maximising the summed IoU; an unmatched object scores 0.
- label accuracy: truth objects (not robot, not table) with >= `min_pixels` visible
  pixels whose best-overlapping predicted instance (most shared pixels, id 0 excluded)
  carries a label of the object's type; no overlapping instance = wrong.
- obstacle recall, as the shield uses perception (carryon_shield.core.grounding.assemble
  drops points labelled `robot`, exempts the subtask's target and keeps everything else,
  `table` included): truth obstacle points are the pixels, with depth, of every object
  except the robot, the table, the frame's target and what the gripper holds (objects
  resting in or on the target stay obstacles), whose point lies within `path_radius_m` of
  the gripper's path. One is KEPT when its predicted instance id is not 0 and its label is
  not `robot` (`table`, a wrong label, `unknown_<n>`: the shield still avoids it); recall
  is the kept fraction, pooled over points, overall and per camera. Beside it:
  `obstacle_points_labelled_as_objects` (the stricter view: labelled neither `robot`,
  `table` nor id 0) and the misses by cause, labelled `robot` or id 0 (no instance), per
  truth object type.
- time per frame: wall time around `perceive` and its own `timings_ms["total"]`, p50 / p99,
  at 256x256 (the sim profile's camera size) and at 640x480, pinned to one core.
The backend is `build_tabletop` with perception_node's config file (`--set
perception_node.KEY=VALUE` overrides it) and the scene file's object names. Writes
results.json / results.md (by the CLI) and `perception.png` to the run folder.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from rich.progress import Progress

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, percentile
from carryon_bench.cpu import one_core
from carryon_bench.node_config import node_config
from carryon_bench.perception_metrics import ScoreParams, Tally, Taxonomy, load_taxonomy, score_camera
from carryon_bringup.core.graph import find_config_dir
from carryon_bringup.up import default_config_fallbacks
from carryon_common.core.clouds import CameraView, ObservationUnusable
from carryon_common.core.config import read_yaml
from carryon_perception.core.types import PerceptionResult
from carryon_sim.harness.perception_frames import PerceptionFrame, frame_plan, perception_frames

SIZES = ((256, 256), (640, 480))  # (width, height): the sim profile's cameras, then VGA
TARGET_IOU, TARGET_ACCURACY, TARGET_RECALL = 0.80, 95.0, 99.5
CAMERAS = ("scene", "wrist")
DEFAULT_PARAMS = ScoreParams()


class Perception(Protocol):
    def perceive(
        self, views: Sequence[CameraView], joints: Mapping[str, float], gripper_width_m: float | None, stamp_s: float
    ) -> PerceptionResult: ...


def camera_views(frame: PerceptionFrame) -> list[CameraView]:
    """What perception is given: colour, depth, intrinsics and pose, NOT the segmentation."""
    return [
        CameraView(name, frame.stamp_s, f.rgb, f.depth, None, {}, f.K, f.world_from_camera)
        for name, f in frame.cameras.items()
    ]


@dataclass
class SizeRun:
    tally: Tally
    wall_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    build_ms: list[float] = field(default_factory=list)
    unusable: list[str] = field(default_factory=list)  # frames perception refused (scored as all background)
    missing: int = 0  # cameras without a segmentation in the result (scored as all background)
    frames: int = 0
    groups: Counter[str] = field(default_factory=Counter)  # frames per scene:, tag:, situation:


def measure(
    frames: Iterable[PerceptionFrame],
    build: Callable[[str], Perception],
    taxonomy: Taxonomy,
    params: ScoreParams,
    on_frame: Callable[[], None] = lambda: None,
) -> SizeRun:
    """Perceive and score every frame; a fresh `build(scene)` at each new sequence."""
    run = SizeRun(Tally(taxonomy))
    sequence, perception = "", None
    for frame in frames:
        if frame.sequence != sequence or perception is None:
            began = time.perf_counter()
            perception, sequence = build(frame.scene), frame.sequence
            run.build_ms.append(1e3 * (time.perf_counter() - began))
        groups = (f"scene:{frame.scene}", f"tag:{frame.tag}", *(f"situation:{s}" for s in frame.situations))
        run.frames += 1
        run.groups.update(groups)
        began = time.perf_counter()
        try:
            result: PerceptionResult | None = perception.perceive(
                camera_views(frame), frame.joints, frame.gripper_width_m, frame.stamp_s
            )
        except ObservationUnusable as exc:
            result = None
            run.unusable.append(f"{frame.sequence}@{frame.stamp_s:.2f}: {exc}")
        run.wall_ms.append(1e3 * (time.perf_counter() - began))
        if result is not None:
            run.total_ms.append(result.timings_ms.get("total", sum(result.timings_ms.values())))
        for name, cam in frame.cameras.items():
            seg = result.segmentations.get(name) if result is not None else None
            run.missing += seg is None and result is not None
            predicted = seg.instances if seg is not None else np.zeros_like(cam.segmentation)
            geometry = (cam.depth, cam.K, cam.world_from_camera, frame.gripper_path)
            score = score_camera(
                cam.segmentation,
                cam.labels,
                predicted,
                seg.labels if seg else {},
                geometry=geometry,
                taxonomy=taxonomy,
                params=params,
                exempt={frame.target, *frame.held} - {""},
            )
            run.tally.add(score, (f"camera:{name}", *groups))
        on_frame()
    return run


def plot(runs: Mapping[str, SizeRun], path: Path) -> None:
    """IoU per object type, label accuracy and obstacle recall, time per frame; per size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"width_ratios": [3, 1.3, 1.3]})
    width = 0.8 / len(runs)
    tables = {size: run.tally.by_type() for size, run in runs.items()}
    kinds = sorted({k for t in tables.values() for k, row in t.items() if not np.isnan(row["iou_mean"])})
    for n, (size, run) in enumerate(runs.items()):
        table, summary = tables[size], run.tally.summary()
        offset = -0.4 + width * (n + 0.5)
        x = np.arange(len(kinds)) + offset
        axes[0].bar(x, [table.get(k, {}).get("iou_mean", np.nan) for k in kinds], width, label=size)
        axes[1].bar(np.arange(2) + offset, [summary["label_accuracy"], summary["obstacle_recall"]], width, label=size)
        times = [percentile(run.wall_ms, 50), percentile(run.wall_ms, 99)]
        axes[2].bar(np.arange(2) + offset, times, width, label=size)
    axes[0].axhline(TARGET_IOU, color="k", ls="--", lw=0.8)
    axes[0].set_xticks(np.arange(len(kinds)), kinds, fontsize=8)
    axes[0].set(ylim=(0, 1), ylabel="mask IoU", title=f"IoU per object type (target >= {TARGET_IOU})")
    for ax, names in ((axes[1], ["label accuracy", "obstacle recall"]), (axes[2], ["p50", "p99"])):
        ax.set_xticks(np.arange(2), names, fontsize=8)
    axes[1].set(ylim=(0, 100), ylabel="%", title=f"targets {TARGET_ACCURACY:g} % / {TARGET_RECALL:g} %")
    axes[1].hlines([TARGET_ACCURACY, TARGET_RECALL], [-0.45, 0.55], [0.45, 1.45], colors="k", linestyles="--", lw=0.8)
    axes[2].set(ylabel="ms", title="perceive wall time per frame (one core)")
    axes[2].legend(fontsize=8, loc="upper left")  # one legend: the same colour per size in every panel
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_metrics(result: BenchResult, size: str, run: SizeRun, headline: bool) -> None:
    """The figures of one size; the headline size's without a suffix, with the targets."""
    s = run.tally.summary()
    tag = "" if headline else f"_{size}"
    result.add(f"iou_mean{tag}", s["iou_mean"], "IoU", f"{s['iou_scored']} masks, {size}; target >= {TARGET_IOU}")
    result.add(f"label_accuracy{tag}", s["label_accuracy"], "%", f"{s['labels_scored']} objects; target >= 95 %")
    note = f"{s['obstacle_points']} points within 10 cm of the path, neither target nor held; target >= 99.5 %"
    result.add(f"obstacle_recall{tag}", s["obstacle_recall"], "%", note)
    for camera in CAMERAS:
        c = run.tally.summary(f"camera:{camera}")
        note = f"{c['obstacle_points']} points seen by the {camera} camera"
        result.add(f"obstacle_recall_{camera}{tag}", c["obstacle_recall"], "%", note)
    note = "the same points labelled as objects (neither robot, table nor id 0)"
    result.add(f"obstacle_points_labelled_as_objects{tag}", s["obstacle_points_labelled_as_objects"], "%", note)
    result.add(f"obstacle_missed_robot{tag}", s["obstacle_missed_robot"], "points", "missed: labelled robot")
    result.add(f"obstacle_missed_none{tag}", s["obstacle_missed_none"], "points", "missed: instance id 0")
    if headline:
        table = run.tally.by_type()
        for kind, row in table.items():
            if not np.isnan(row["iou_mean"]):
                result.add(f"iou_{kind}", row["iou_mean"], "IoU", f"{row['iou_scored']} masks")
        for kind, row in table.items():
            if row["obstacle_points"]:
                missed = row["obstacle_missed_robot"] + row["obstacle_missed_none"]
                note = (
                    f"{missed} of {row['obstacle_points']} points missed: {row['obstacle_missed_robot']} "
                    f"labelled robot, {row['obstacle_missed_none']} id 0"
                )
                result.add(f"obstacle_recall_{kind}", row["obstacle_recall"], "%", note)
    for q in (50, 99):
        result.add(f"perceive_p{q}_{size}", percentile(run.wall_ms, q), "ms", "wall time around perceive, one core")
    for q in (50, 99):
        result.add(f"pipeline_total_p{q}_{size}", percentile(run.total_ms, q), "ms", "its own timings_ms['total']")


def details(run: SizeRun, params: ScoreParams) -> dict[str, Any]:
    return {
        "frames": run.frames,
        "summary": run.tally.summary(),
        "by_type": run.tally.by_type(),
        "by_camera": {c: run.tally.summary(f"camera:{c}") for c in CAMERAS},
        # per truth object type and camera: points near the path and what became of them
        "obstacle_misses": {
            c: {k: vars(n) for k in run.tally.by_type() if (n := run.tally.points(f"camera:{c}", k)).points}
            for c in CAMERAS
        },
        "by_group": {g: {"frames": n, **run.tally.summary(g)} for g, n in sorted(run.groups.items())},
        "robot_iou_mean": float(np.mean(run.tally.robot_iou)) if run.tally.robot_iou else float("nan"),
        "build_ms_p50": percentile(run.build_ms, 50),
        "perceptions_built": len(run.build_ms),
        "unusable_frames": run.unusable,
        "missing_segmentations": run.missing,
        "params": vars(params),
    }


def evaluate(
    options: BenchOptions,
    build: Callable[[str], Perception],
    frames_at: Callable[[tuple[int, int]], Iterable[PerceptionFrame]],
    taxonomy: Taxonomy,
    *,
    sizes: Sequence[tuple[int, int]] = SIZES,
    params: ScoreParams = DEFAULT_PARAMS,
) -> BenchResult:
    """Run `build`'s perception over `frames_at(size)` for each size (the first is the
    headline), on one core; write perception.png to the run folder."""
    result = BenchResult("perception", options.quick, options.seed)
    runs: dict[str, SizeRun] = {}
    with one_core() as pinning, Progress() as progress:
        result.details["cpu"] = pinning
        for width, height in sizes:
            size = f"{width}x{height}"
            job = progress.add_task(f"perception frames {size}")
            runs[size] = measure(frames_at((width, height)), build, taxonomy, params, partial(progress.advance, job))
    result.add("frames", next(iter(runs.values())).frames, "frames", "per camera size")
    for n, (size, run) in enumerate(runs.items()):
        add_metrics(result, size, run, headline=n == 0)
        result.details[size] = details(run, params)
    options.run_dir.mkdir(parents=True, exist_ok=True)
    plot(runs, options.run_dir / "perception.png")
    return result


def run(options: BenchOptions) -> BenchResult:
    from carryon_perception.core.build import build_tabletop
    from carryon_perception.core.config import PerceptionConfig

    config_dir = find_config_dir(options.config_dir, default_config_fallbacks())
    config = node_config(options, PerceptionConfig, "perception_node")
    plan = frame_plan(options.quick, options.seed)

    def build(scene: str) -> Perception:
        # The scene's objects, as scene memory would list them (obstacle_3, placed during a run, too).
        names = [o["name"] for o in read_yaml(config_dir / "scenes" / f"{scene}.yaml")["objects"]]
        return build_tabletop(config_dir, scene, objects=names, config=config)

    result = evaluate(
        options,
        build,
        lambda size: perception_frames(plan, size=size, scenes=config_dir / "scenes"),
        load_taxonomy(config_dir),
    )
    result.details["config"] = config.model_dump(mode="json")
    result.details["plan"] = vars(plan)
    return result


BENCHMARKS.register(
    "perception",
    Benchmark("perception", "mask IoU, label accuracy, obstacle recall and time per frame against sim truth", run),
)
