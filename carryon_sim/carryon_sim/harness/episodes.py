"""Closed-loop episodes of a policy on the simulated world, in one process (no ROS).

Used by `carryon bench policy`, `carryon bench shield` / `safety` and the tests to
measure what a backend does: task success from simulator ground truth and collisions with
objects the task does not permit. The loop is policy_node's own (ChunkRunner): every
`steps_per_inference` control steps the policy gets an observation and its chunk replaces
what is left of the previous one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from carryon_common.core.chunk import Chunk
from carryon_policy.core.policy import InvalidAction, ObjectPose, Observation, Policy, RobotState
from carryon_policy.core.runner import ChunkRunner, RunProgress
from carryon_policy.core.timing import InferenceRecord
from carryon_sim.core.contacts import ContactMonitor, Violation, grasped_objects
from carryon_sim.core.driver import Driver
from carryon_sim.core.objects import Role
from carryon_sim.core.predicates import covered_by, inside_of
from carryon_sim.core.scene import TABLE_TOP_Z, Scene
from carryon_sim.core.world import World
from carryon_sim.harness.stand_in.scripts import Script


def observe(world: World, observation_id: int, steps_executed: int) -> Observation:
    """Robot state and object ground truth of `world` now (no images)."""
    position, rotation = world.ee_pose()
    objects = {}
    for body_id, name in world.object_of_body.items():
        if name in ("robot", "table"):
            continue
        objects[name] = ObjectPose(
            np.array(world.data.xpos[body_id], dtype=np.float64), np.array(world.data.xquat[body_id], dtype=np.float64)
        )
    return Observation(
        observation_id=observation_id,
        stamp_s=world.time,
        robot=RobotState(position, rotation, world.arm_q(), world.gripper_width()),
        objects=objects,
        scene=world.scene.name,
        steps_executed=steps_executed,
    )


def script_succeeded(world: World, script: Script, start: dict[str, np.ndarray]) -> bool:
    """Ground-truth success of a scripted skill: the object is in / on the destination and
    not held (pick_place); the cover no longer hides what it hid (lift_aside); the object
    moved at least half the offset (push)."""
    if script.motion == "pick_place":
        held = script.object in grasped_objects(world.model, world.data, world.object_of_body)
        return inside_of(world, script.object) == script.destination and not held
    if script.motion == "lift_aside":
        hidden = [n for n in start if n != script.object and covered_by(world, n) == script.object]
        held = script.object in grasped_objects(world.model, world.data, world.object_of_body)
        resting = world.object_position(script.object)[2] < TABLE_TOP_Z + 0.01
        return not hidden and not held and resting
    moved = world.object_position(script.object)[:2] - start[script.object][:2]
    wanted = np.asarray(script.offset)
    return bool(moved @ wanted >= 0.5 * wanted @ wanted)


@dataclass
class EpisodeResult:
    success: bool
    steps: int
    completed: int = 0  # tasks completed, in order
    violations: list[Violation] = field(default_factory=list)
    infer_s: list[float] = field(default_factory=list)
    dropped_chunks: int = 0  # chunks the gate released nothing of

    @property
    def collided(self) -> bool:
        return bool(self.violations)


def permitted_contacts(world: World, script: Script) -> set[str]:
    """What the task may touch: the table, its object, destination, and the object's
    support and what its cover hides (the TCP grazes them while grasping)."""
    names = {"table", script.object, script.destination} - {""}
    names.add(inside_of(world, script.object))
    for obj in world.scene.spec.objects:
        if covered_by(world, obj.name) == script.object or covered_by(world, script.object) == obj.name:
            names.add(obj.name)
    return names - {""}


def without_obstacles(scene: Scene) -> Scene:
    """The same scene with its obstacles removed (for runs 'without obstacles')."""
    objects = [o for o in scene.spec.objects if o.kind.role != Role.OBSTACLE]
    return Scene(scene.path, scene.spec.model_copy(update={"objects": objects}))


@dataclass(frozen=True)
class Task:
    """One instruction of an episode and the script that defines its success."""

    instruction: str
    script: Script
    max_steps: int


class _TaskPort:
    """The ChunkPort of one task: observations of `world` (no images), chunks through the
    gate to the driver, one physics step per control step, stop once success settled."""

    def __init__(
        self,
        world: World,
        driver: Driver,
        monitor: ContactMonitor,
        result: EpisodeResult,
        task: Task,
        *,
        gate: Callable[[Chunk, World], Chunk | None] | None,
        dt: float,
        settle_steps: int,
    ) -> None:
        self.world, self.driver, self.monitor, self.result, self.task = world, driver, monitor, result, task
        self.gate, self.dt, self.settle_steps = gate, dt, settle_steps
        self.start = {o.name: world.object_position(o.name) for o in world.scene.spec.objects}
        self.settled = -1
        self.success = False

    def observe(self, steps_executed: int) -> tuple[float, Observation]:
        return self.world.time, observe(self.world, self.result.steps, steps_executed)

    def send(self, chunk: Chunk, record: InferenceRecord) -> None:
        self.result.infer_s.append(record.infer_s)
        released = chunk if self.gate is None else self.gate(chunk, self.world)
        if released is not None:
            self.driver.submit(released, self.world.time)
        else:
            self.result.dropped_chunks += 1

    def dropped(self, error: InvalidAction) -> None:
        raise error  # no output check in episodes: a backend's invalid output is a bug here

    def skip(self) -> None:
        raise AssertionError("unreachable: dropped() raises")

    def advance(self, steps: int, progress: RunProgress) -> bool:
        world, script = self.world, self.task.script
        for step in range(progress.steps_executed, progress.steps_executed + steps):
            self.driver.tick(world.time)
            world.step(self.dt)
            self.monitor.update(world.model, world.data, world.object_of_body)
            self.result.steps += 1
            if self.settled < 0 and script_succeeded(world, script, self.start):
                self.settled = step
            if self.settled >= 0 and step - self.settled >= self.settle_steps:
                self.success = script_succeeded(world, script, self.start)
                return True
        return False


def run_episode(
    world: World,
    policy: Policy,
    tasks: Sequence[Task],
    seed: int,
    *,
    steps_per_inference: int,
    dt: float = 0.05,
    clock: Callable[[], float] = time.perf_counter,
    settle_steps: int = 10,
    gate: Callable[[Chunk, World], Chunk | None] | None = None,
) -> EpisodeResult:
    """Reset the world with `seed`, then run each task in turn (as the executive would:
    the next starts when the previous succeeded); stop at the first task that does not
    succeed within its `max_steps` control steps. Success is judged from ground truth
    after `settle_steps` more steps. `clock` times inference. `gate` (e.g. a shield) sees
    each chunk with the world and returns what to execute (None: nothing; the driver's
    watchdog then holds the arm)."""
    world.reset(seed)
    driver = Driver(world, watchdog_s=0.25)
    monitor = ContactMonitor()
    result = EpisodeResult(success=False, steps=0)
    for number, task in enumerate(tasks):
        monitor.set_task(permitted_contacts(world, task.script))
        port = _TaskPort(world, driver, monitor, result, task, gate=gate, dt=dt, settle_steps=settle_steps)
        policy.reset(task.instruction, seed * 100 + number)
        runner = ChunkRunner(
            policy, dt=dt, steps_per_inference=steps_per_inference, subtask_id=str(number), clock=clock
        )
        runner.run(port, task.max_steps)
        result.violations.extend(monitor.violations)
        monitor.violations.clear()
        result.completed = number + 1 if port.success else number
        if not port.success:
            break
    result.success = result.completed == len(tasks)
    return result
