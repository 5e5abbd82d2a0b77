"""`carryon bench judge`: does the geometric judge agree with the SIMULATOR ORACLE, and how
fast is each judge backend?

1. States (generated now, in-process MuJoCo, no ROS; never stored): food-serving episodes
   of the scripted stand-in ("open the pink cover", then "put the carrot in the bowl"),
   the scene and wrist cameras rendered with carryon_sim's CameraRig at 320x240. For each
   subtask the baseline is the observation at its start; states are recorded during the
   subtask and after it settled. Variants: normal episodes (successes), drops (drop
   probability 1), stuck policies (stuck probability 1), near-misses (the carrot set down
   just outside the bowl), a different object in the bowl, the goal already present at
   baseline, and observe subtasks over the covered / uncovered carrot. Time since
   progress comes from ground-truth target motion, the same for every judge.
2. Verdicts of `geometric` (masks + depth + gripper state) vs `sim_oracle` (ground truth,
   the same rules): agreement (goal >= 95 % on >= 200 states) and the confusion matrix.
3. Latency per backend: geometric, sim_oracle, and vlm against the local stub server
   (scripted replies: this is the client + image encoding + HTTP cost, NOT a model's).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from carryon_bench.core.bench import BENCHMARKS, Benchmark, BenchOptions, BenchResult, percentile
from carryon_common.core.subtask import Subtask, SubtaskKind
from carryon_judge.core.backends import GeometricJudge, perception_params, rule_params, shapes_for
from carryon_judge.core.config import JudgeConfig
from carryon_judge.core.progress import tracker_for
from carryon_judge.core.rules import goal_of
from carryon_judge.core.types import JudgeRequest, JudgeVerdict, Observation, VerdictStatus
from carryon_policy.core.runner import policy_chunk

if TYPE_CHECKING:
    from carryon_sim.harness.observation import SimObservation

STUCK_TIMEOUT_S = 5.0  # short, so stuck and dropped episodes reach "failed" within a 20 s subtask
WIDTH, HEIGHT = 320, 240
RECORD_EVERY = 30  # control steps (1.5 s) between recorded states
GOAL_AGREEMENT = 95.0

UNCOVER = Subtask("s1", SubtaskKind.VLA, "uncover the carrot", "open the pink cover", target="pink_cover")
OBSERVE = Subtask("o1", SubtaskKind.OBSERVE, "report what is under the pink cover", "", target="pink_cover")
PLACE = Subtask(
    "s2", SubtaskKind.VLA, "the carrot in the bowl", "put the carrot in the bowl", target="carrot", destination="bowl"
)


@dataclass(frozen=True)
class State:
    category: str
    request: JudgeRequest


class _Recorder:
    """Plays the stand-in on the world and records judge requests at chosen moments."""

    def __init__(self, world: Any, rig: Any, shapes: Any) -> None:
        self.world, self.rig, self.shapes = world, rig, shapes
        self.states: list[State] = []
        self._next_id = 0

    def observe(self) -> SimObservation:
        from carryon_sim.harness.observation import observe_world

        self._next_id += 1
        return observe_world(self.world, self.rig, self._next_id)

    def target_facts(self, target: str) -> Any:
        from carryon_sim.harness.observation import truth_of
        from carryon_sim.harness.oracle import facts_from_truth

        return facts_from_truth(truth_of(self.world), self.shapes).visible(target)

    def add(self, category: str, subtask: Subtask, baseline: Observation, since: float, **kw: Any) -> Observation:
        current = self.observe()
        elapsed = current.stamp_s - baseline.stamp_s
        self.states.append(State(category, JudgeRequest(subtask, baseline, current, elapsed, since, **kw)))
        return current

    def play(
        self, policy: Any, instruction: str, seed: int, subtasks: list[Subtask], *, category: str
    ) -> tuple[bool, Observation, float]:
        """Run one instruction; record every RECORD_EVERY steps and after settling.
        Returns (succeeded by ground truth, baseline, since-progress at the end)."""
        from carryon_sim.core.driver import Driver
        from carryon_sim.harness.episodes import observe as policy_observe
        from carryon_sim.harness.episodes import script_succeeded
        from carryon_sim.harness.stand_in import stand_in_script

        world = self.world
        script = stand_in_script(instruction)
        start = {o.name: world.object_position(o.name) for o in world.scene.spec.objects}
        driver = Driver(world, watchdog_s=0.25)
        policy.reset(instruction, seed)
        from carryon_sim.harness.oracle import facts_from_truth

        baseline = self.observe()
        truth = facts_from_truth(baseline.truth or {}, self.shapes)
        tracker = tracker_for(goal_of(subtasks[0], self.shapes.role), truth, threshold_m=JudgeConfig().progress_m)
        tracker.start(world.time, self.target_facts(subtasks[0].target))
        since, settled, done = 0.0, -1, False
        for step in range(400):
            if step % 8 == 0:
                out = policy.infer(policy_observe(world, step, step))
                chunk = policy_chunk(
                    out, chunk_id=step, subtask_id=subtasks[0].id, dt=0.05, observation_id=step, stamp_s=world.time
                )
                driver.submit(chunk, world.time)
            driver.tick(world.time)
            world.step(0.05)
            if step % 4 == 0:
                since = tracker.update(world.time, self.target_facts(subtasks[0].target))
            if step and step % RECORD_EVERY == 0:
                for subtask in subtasks:
                    self.add(category if subtask.kind == "vla" else "observe", subtask, baseline, since)
            if settled < 0 and script_succeeded(world, script, start):
                settled = step
            if settled >= 0 and step - settled >= 10:
                done = True
                break
        since = tracker.update(world.time, self.target_facts(subtasks[0].target))
        for subtask in subtasks:
            self.add(f"{category if subtask.kind == 'vla' else 'observe'} (end)", subtask, baseline, since)
        return done, baseline, since


def record_states(episodes: int, first_seed: int, progress: Progress | None = None) -> list[State]:
    """Judge requests from `episodes` food-serving episodes (see the module docstring)."""
    os.environ.setdefault("LP_NUM_THREADS", "1")
    from carryon_policy.core.backends import make_policy
    from carryon_policy.core.config import PolicyConfig
    from carryon_sim.core.cameras import CameraRig
    from carryon_sim.core.scene import load_scene, scenes_dir
    from carryon_sim.core.world import World

    scene = load_scene(scenes_dir() / "food_serving.yaml")
    world = World(scene, seed=first_seed)
    rig = CameraRig(world.model, world.object_of_body, WIDTH, HEIGHT)
    shapes = shapes_for(JudgeConfig())
    recorder = _Recorder(world, rig, shapes)
    job = progress.add_task("recording states", total=episodes) if progress else None
    try:
        for n in range(episodes):
            seed = first_seed + n
            variant = ("normal", "drop", "stuck", "normal")[n % 4]
            world.reset(seed)
            opener = make_policy(
                PolicyConfig(
                    backend="sim_scripted",
                    scripted_drop_probability=0.0,
                    scripted_slip_probability=0.0,
                    scripted_stuck_probability=0.0,
                )
            )
            opened, _, _ = recorder.play(opener, "open the pink cover", seed, [UNCOVER, OBSERVE], category="uncover")
            if opened:
                config = PolicyConfig(
                    backend="sim_scripted",
                    scripted_slip_probability=0.0,
                    scripted_drop_probability=1.0 if variant == "drop" else 0.0,
                    scripted_stuck_probability=1.0 if variant == "stuck" else 0.0,
                )
                completed = {"completed": (UNCOVER, OBSERVE)}
                placed, baseline, _since = _place(recorder, make_policy(config), seed, variant, completed)
                if placed:
                    _extras(recorder, baseline, completed)
            if job is not None and progress is not None:
                progress.advance(job)
    finally:
        rig.close()
    return recorder.states


def _place(recorder: _Recorder, policy: Any, seed: int, variant: str, kw: dict[str, Any]) -> tuple[bool, Any, float]:
    states_before = len(recorder.states)
    placed, baseline, since = recorder.play(
        policy, "put the carrot in the bowl", seed + 1, [PLACE], category=f"place/{variant}"
    )
    for index in range(states_before, len(recorder.states)):  # credit the completed subtasks
        state = recorder.states[index]
        request = state.request
        recorder.states[index] = State(
            state.category,
            JudgeRequest(
                request.subtask, request.baseline, request.current, request.elapsed_s, request.since_progress_s, **kw
            ),
        )
    return placed, baseline, since


def _extras(recorder: _Recorder, place_baseline: Observation, kw: dict[str, Any]) -> None:
    """After a placement: goal already present at baseline, a near-miss, a different object."""
    world = recorder.world
    settled = recorder.observe()
    world.step(0.5)
    recorder.add("goal at baseline", PLACE, settled, 1.0, **kw)
    recorder.add("goal at baseline, past timeout", PLACE, settled, STUCK_TIMEOUT_S + 3.0, **kw)
    rng = np.random.default_rng(world.seed)
    bx, by, _ = world.object_position("bowl")
    cx, cy, _ = world.object_position("carrot")
    angle = rng.uniform(-np.pi / 2, np.pi / 2)  # beside the bowl, on the robot's side or the sides
    radius = rng.uniform(0.13, 0.16)
    world.displace("carrot", bx - radius * np.cos(angle) - cx, by + radius * np.sin(angle) - cy, 0.01)
    world.step(1.0)
    recorder.add("near-miss", PLACE, place_baseline, 0.5, **kw)
    recorder.add("near-miss, past timeout", PLACE, place_baseline, STUCK_TIMEOUT_S + 2.0, **kw)
    mx, my, _ = world.object_position("meat")
    world.displace("meat", bx - mx, by - my, 0.03)
    world.step(1.0)
    recorder.add("different object in bowl", PLACE, place_baseline, 0.5, **kw)


LABELS = tuple(VerdictStatus)


def _same(a: JudgeVerdict, b: JudgeVerdict) -> bool:
    """Agreement: the same status and, for observe subtasks, the same revealed contents."""
    return a.status == b.status and a.revealed_contents == b.revealed_contents


def _time(judge: Callable[[JudgeRequest], JudgeVerdict], states: list[State]) -> tuple[list[JudgeVerdict], list[float]]:
    verdicts, times = [], []
    for state in states:
        began = time.perf_counter()
        verdicts.append(judge(state.request))
        times.append(1e3 * (time.perf_counter() - began))
    return verdicts, times


def _vlm_latency(states: list[State], calls: int) -> list[float]:
    from carryon_judge.core.vlm import VlmJudge, VlmParams, vlm_client
    from carryon_sim.harness.fakes.openai_server import StubVlmServer

    reply = {
        "status": "running",
        "reason": "stub",
        "placed_object": None,
        "identity_certain": False,
        "goal_present_at_baseline": False,
        "target_changed": True,
        "revealed_contents": None,
        "scene_update_required": False,
    }
    with StubVlmServer(default=reply) as stub:
        config = JudgeConfig(vlm_base_url=stub.base_url, vlm_model="stub")
        judge = VlmJudge(vlm_client(config, api_key="x"), VlmParams.from_config(config))
        _, times = _time(judge.judge, states[:calls])
    return times


def run(options: BenchOptions) -> BenchResult:
    from carryon_sim.harness.oracle import SimOracleJudge

    result = BenchResult("judge", options.quick, options.seed)
    episodes = 3 if options.quick else 10
    config = JudgeConfig(stuck_timeout_s=STUCK_TIMEOUT_S)
    shapes = shapes_for(config)
    geometric = GeometricJudge(shapes, rule_params(config), perception_params(config))
    oracle = SimOracleJudge(shapes, rule_params(config))
    with Progress() as progress:
        started = time.perf_counter()
        states = record_states(episodes, options.seed * 1000, progress)
        record_s = time.perf_counter() - started
    truth, oracle_ms = _time(oracle.judge, states)
    seen, geometric_ms = _time(geometric.judge, states)
    vlm_ms = _vlm_latency(states, 10 if options.quick else 40)

    n = len(states)
    agree = sum(_same(t, s) for t, s in zip(truth, seen, strict=True))
    matrix = Counter((t.status, s.status) for t, s in zip(truth, seen, strict=True))
    goal = f"goal >= {GOAL_AGREEMENT:.0f} % on >= 200 states" if not options.quick else "quick run"
    result.add("states", n, "states", f"{episodes} episodes, recorded in {record_s:.0f} s")
    result.add("geometric_vs_oracle_agreement", 100.0 * agree / n, "%", goal)
    wrong_success = (
        matrix[(VerdictStatus.RUNNING, VerdictStatus.SUCCESS)] + matrix[(VerdictStatus.FAILED, VerdictStatus.SUCCESS)]
    )
    result.add("geometric_false_success", wrong_success, "states", "geometric success where the oracle says otherwise")
    for name, samples in (("geometric", geometric_ms), ("sim_oracle", oracle_ms)):
        result.add(f"{name}_latency_p50", percentile(samples, 50), "ms", f"{n} verdicts, 2 cameras {WIDTH}x{HEIGHT}")
        result.add(f"{name}_latency_p99", percentile(samples, 99), "ms")
    note = "STUB server on loopback (client + 4 JPEG images + HTTP), not a model"
    result.add("vlm_stub_latency_p50", percentile(vlm_ms, 50), "ms", note)
    result.add("vlm_stub_latency_p99", percentile(vlm_ms, 99), "ms")

    table = Table(title=f"judge confusion matrix: rows SIMULATOR ORACLE, columns geometric ({n} states)")
    table.add_column("oracle \\ geometric")
    for label in LABELS:
        table.add_column(label.label, justify="right")
    for row in LABELS:
        table.add_row(row.label, *(str(matrix[(row, col)]) for col in LABELS))
    Console().print(table)
    by_category: dict[str, list[int]] = {}
    disagreements = []
    for state, t, s in zip(states, truth, seen, strict=True):
        by_category.setdefault(state.category, [0, 0])
        by_category[state.category][0] += 1
        by_category[state.category][1] += int(_same(t, s))
        if not _same(t, s):
            disagreements.append(
                {
                    "category": state.category,
                    "subtask": state.request.subtask.id,
                    "oracle": t.status.label,
                    "oracle_reason": t.reason,
                    "geometric": s.status.label,
                    "geometric_reason": s.reason,
                }
            )
    categories = Table(title="states per category")
    for column in ("category", "states", "agree", "oracle verdicts"):
        categories.add_column(column)
    verdicts_by_category: dict[str, Counter[str]] = {}
    for state, t in zip(states, truth, strict=True):
        verdicts_by_category.setdefault(state.category, Counter())[t.status.label] += 1
    for category, (total, agreed) in sorted(by_category.items()):
        counts = ", ".join(f"{k} {v}" for k, v in sorted(verdicts_by_category[category].items()))
        categories.add_row(category, str(total), str(agreed), counts)
    Console().print(categories)
    result.details.update(
        confusion={r.label: {c.label: matrix[(r, c)] for c in LABELS} for r in LABELS},
        categories={k: {"states": v[0], "agree": v[1]} for k, v in by_category.items()},
        disagreements=disagreements,
        stuck_timeout_s=STUCK_TIMEOUT_S,
        cameras=f"scene + wrist, {WIDTH}x{HEIGHT}",
    )
    return result


BENCHMARKS.register(
    "judge",
    Benchmark(
        "judge",
        "geometric judge vs SIMULATOR ORACLE on recorded food-serving states (confusion matrix), latency per backend",
        run,
    ),
)
