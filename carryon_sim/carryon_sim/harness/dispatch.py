"""The executive's Dispatch on the in-process simulator (no ROS): for tests and benchmarks.

* `run_vla`: the execution loop of `core.executive.run_vla` over `SimPlant` — the policy
  (any `Policy`; the scripted stand-in in simulation) drives the MuJoCo world through the
  same Driver as sim_node, optionally through a gate (e.g. the shield), while the judge
  (any carryon_judge `Judge`; most tests use the SIMULATOR ORACLE, `harness.oracle`)
  decides every `judge_every_steps`.
  On a failed verdict the policy is suspended, `recover` runs, and the original
  instruction resumes with the remaining budget.
* `observe`: what can be SEEN at the location, from simulator ground truth: objects in the
  location's region that no cover hides, as "meat in plate" / "carrot" (a covered object
  is not reported; its cover is). This is a SIMULATOR ORACLE stand-in for perception.
* `say`: appended to `said` (the transcript).

A recovery skill is injected (`recover(plant, subtask)`): carryon_recovery's base skill
(`harness.recovery_io.base_skill_recovery`), or `resume_only`, a stand-in that does
nothing and asks to resume.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from carryon_common.core.chunk import Chunk
from carryon_common.core.subtask import Subtask
from carryon_judge.core.geometry import ShapeTable
from carryon_judge.core.progress import ProgressTracker, tracker_for
from carryon_judge.core.rules import goal_of
from carryon_judge.core.types import Judge, JudgeRequest, VerdictStatus
from carryon_planner.core.executive import Report, Verdict, run_vla
from carryon_planner.core.plan import PlannedSubtask
from carryon_policy.core.policy import ImageArray, Policy
from carryon_policy.core.runner import policy_chunk
from carryon_sim.core.driver import Driver
from carryon_sim.core.predicates import covered_by, inside_of, location_of
from carryon_sim.core.world import World
from carryon_sim.harness.episodes import observe as policy_observation
from carryon_sim.harness.observation import SimObservation, observe_world, truth_of
from carryon_sim.harness.oracle import facts_from_truth

Gate = Callable[[Chunk, World], Chunk | None]
Recover = Callable[["SimPlant", PlannedSubtask], tuple[bool, str]]

_VERDICTS = {
    VerdictStatus.RUNNING: Verdict.RUNNING,
    VerdictStatus.SUCCESS: Verdict.SUCCESS,
    VerdictStatus.FAILED: Verdict.FAILED,
    VerdictStatus.UNABLE_TO_JUDGE: Verdict.UNABLE,
}


def resume_only(_plant: SimPlant, _subtask: PlannedSubtask) -> tuple[bool, str]:
    """Recovery stand-in (no recovery skill yet): do nothing, resume the instruction."""
    return True, "no recovery skill configured (stand-in): resuming the instruction"


def _near(world: World, name: str, location: str, margin_m: float) -> bool:
    spec = world.scene.spec.locations[location]
    x, y, _ = world.object_position(name)
    (cx, cy), (sx, sy) = spec.center, spec.size
    return bool(abs(x - cx) <= sx / 2 + margin_m and abs(y - cy) <= sy / 2 + margin_m)


def visible_items(world: World, location: str, margin_m: float = 0.1) -> tuple[str, ...]:
    """What a look at `location` shows (SIMULATOR ORACLE): uncovered objects in its region
    (grown by `margin_m`: the camera sees a little around it; an object inside another
    location's region belongs there), "X in Y" when X lies in / on another object."""
    items = []
    for spec in world.scene.spec.objects:
        name = spec.name
        owner = location_of(world, name)
        if (owner != location and (owner or not _near(world, name, location, margin_m))) or covered_by(world, name):
            continue
        host = inside_of(world, name)
        items.append(f"{name} in {host}" if host else name)
    return tuple(sorted(items))


class SimPlant:
    """`VlaPlant` over an in-process World. One control step = `dt` s of simulated time;
    the policy is asked every `steps_per_inference` steps; `verdict()` advances the world
    by `judge_every_steps` before asking the judge (the judge's monitor period). `perturb(world)`
    runs after every step the plant simulates (benchmarks inject drops and displacements there).
    `cameras(world)` renders the images each policy observation carries (a learned
    policy's; None: none); a policy that does not need ground truth gets no object poses.
    `observer(world, id)` makes the judge's observations (cameras + masks for a judge that
    sees; by default ground truth and robot state only, for the SIMULATOR ORACLE judge)."""

    def __init__(
        self,
        world: World,
        policy: Policy,
        judge: Judge,
        shapes: ShapeTable,
        *,
        gate: Gate | None = None,
        recover: Recover = resume_only,
        steps_per_inference: int = 8,
        judge_every_steps: int = 10,
        dt: float = 0.05,
        seed: int = 0,
        progress_m: float = 0.01,
        perturb: Callable[[World], None] | None = None,
        cameras: Callable[[World], Mapping[str, ImageArray]] | None = None,
        observer: Callable[[World, int], SimObservation] | None = None,
    ) -> None:
        self.world, self.policy, self.judge, self.shapes = world, policy, judge, shapes
        self.gate, self.recover_skill = gate, recover
        self.steps_per_inference, self.judge_every_steps, self.dt = steps_per_inference, judge_every_steps, dt
        self.progress_m = progress_m
        self.perturb = perturb  # called after every simulated step (benchmarks' perturbations)
        self.cameras = cameras
        # The judge's observations (id -> views + truth); default: truth and robot state only.
        self.observer = observer or (lambda w, i: observe_world(w, None, i, cameras=()))
        self.driver = Driver(world, watchdog_s=0.25)
        self._seeds = itertools.count(seed * 1000)
        self._ids = itertools.count(1)
        self._running = False
        self._budget = 0
        self._steps = 0
        self._baseline: SimObservation | None = None
        self._tracker: ProgressTracker | None = None
        self.completed: list[Subtask] = []
        self.log: list[str] = []
        self.last_reason = ""  # the judge's latest reason (a recovery's: why it was asked for)

    # -- VlaPlant ------------------------------------------------------------------
    def set_task(self, subtask: PlannedSubtask, permitted: tuple[str, ...] = ()) -> None:  # noqa: ARG002 - no monitor here
        self._baseline = self.observer(self.world, next(self._ids))
        truth = facts_from_truth(self._baseline.truth or {}, self.shapes)
        tracker = tracker_for(goal_of(subtask.as_subtask(), self.shapes.role), truth, threshold_m=self.progress_m)
        tracker.start(self.world.time, truth.visible(subtask.target))
        self._tracker = tracker

    def start_policy(self, subtask: PlannedSubtask, budget: int) -> None:
        if self._tracker is not None:  # (re)started: the stuck clock starts now
            truth = facts_from_truth(truth_of(self.world), self.shapes)
            self._tracker.start(self.world.time, truth.visible(subtask.target))
        self.policy.reset(subtask.instruction, next(self._seeds))
        self._running, self._budget, self._steps = True, budget, 0
        self.log.append(f"{subtask.id}: policy started, {budget} steps")

    def policy_steps(self) -> tuple[int, bool]:
        return self._steps, not self._running

    def suspend_policy(self) -> int:
        self._running = False
        self.driver.hold()
        return self._steps

    def verdict(self, subtask: PlannedSubtask) -> tuple[Verdict, str]:
        for _ in range(self.judge_every_steps):
            self._step(subtask)
        assert self._baseline is not None
        current = self.observer(self.world, next(self._ids))
        truth = facts_from_truth(current.truth or {}, self.shapes)
        since = self._tracker.update(current.stamp_s, truth.visible(subtask.target)) if self._tracker else -1.0
        request = JudgeRequest(
            subtask.as_subtask(),
            self._baseline,
            current,
            current.stamp_s - self._baseline.stamp_s,
            since,
            completed=tuple(self.completed),
        )
        verdict = self.judge.judge(request)
        result = _VERDICTS[verdict.status]
        self.last_reason = verdict.reason
        if result == Verdict.SUCCESS:
            self.completed.append(subtask.as_subtask())
        return result, verdict.reason

    def recover(self, subtask: PlannedSubtask) -> tuple[bool, str]:
        resume, message = self.recover_skill(self, subtask)
        self.log.append(f"{subtask.id}: recovery: {message}")
        return resume, message

    # -- the world -----------------------------------------------------------------
    def _step(self, subtask: PlannedSubtask) -> None:
        world = self.world
        if self._running and self._steps % self.steps_per_inference == 0:
            images = self.cameras(world) if self.cameras is not None else None
            truth = self.policy.metadata.needs_ground_truth
            out = self.policy.infer(
                policy_observation(world, next(self._ids), self._steps, images=images, ground_truth=truth)
            )
            chunk = policy_chunk(
                out, chunk_id=next(self._ids), subtask_id=subtask.id, dt=self.dt, observation_id=0, stamp_s=world.time
            )
            released = chunk if self.gate is None else self.gate(chunk, world)
            if released is not None:
                self.driver.submit(released, world.time)
        self.driver.tick(world.time)
        world.step(self.dt)
        if self.perturb is not None:
            self.perturb(world)
        if self._running:
            self._steps += 1
            if self._steps >= self._budget:
                self._running = False


@dataclass
class SimDispatch:
    """`Dispatch` for the executive on the in-process simulator."""

    plant: SimPlant
    budget_steps: int = 400
    max_recoveries: int = 2
    said: list[str] = field(default_factory=list)
    observed: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def run_vla(self, subtask: PlannedSubtask, permitted: tuple[str, ...] = ()) -> Report:
        return run_vla(
            subtask, self.plant, budget=self.budget_steps, max_recoveries=self.max_recoveries, permitted=permitted
        )

    def observe(self, subtask: PlannedSubtask) -> Report:
        location = subtask.target
        if location not in self.plant.world.scene.spec.locations:
            return Report(False, f"no endpoint named {location!r}")
        items = visible_items(self.plant.world, location)
        self.observed.append((location, items))
        return Report(True, f"SIMULATOR ORACLE: {location} shows {', '.join(items) or 'nothing'}", {location: items})

    def say(self, subtask: PlannedSubtask) -> Report:
        self.said.append(subtask.objective)
        return Report(True, "said")

    def control(self, subtask: PlannedSubtask) -> Report:
        return Report(False, f"no control skill {subtask.target or subtask.objective!r} in simulation")
