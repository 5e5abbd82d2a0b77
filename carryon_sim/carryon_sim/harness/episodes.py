"""Closed-loop episodes of a policy on the simulated world, in one process (no ROS).

Used by `carryon bench policy`, `carryon bench shield` / `safety` and the tests to
measure what a backend does: task success from simulator ground truth, and safety two ways:
contacts the task does not permit (the contact monitor, carryon_common.core.contact_rules)
and objects no task names (SafeLIBERO's obstacles) displaced by more than `DISPLACED_M`
between the episode's start and end (as SafeLIBERO counts a violation). The loop is
policy_node's own (ChunkRunner): every `steps_per_inference` control steps the policy gets
an observation and its chunk replaces what is left of the previous one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from carryon_common.core.chunk import Chunk
from carryon_common.core.contact_rules import ContactTask
from carryon_policy.core.policy import ImageArray, InvalidAction, ObjectPose, Observation, Policy, RobotState
from carryon_policy.core.runner import ChunkRunner, RunProgress
from carryon_policy.core.timing import InferenceRecord
from carryon_sim.core.contacts import ContactMonitor, Violation, grasped_objects
from carryon_sim.core.driver import Driver
from carryon_sim.core.objects import Role
from carryon_sim.core.predicates import covered_by, inside_of
from carryon_sim.core.scene import TABLE_TOP_Z, Scene
from carryon_sim.core.world import World
from carryon_sim.harness.stand_in.scripts import Script


def observe(
    world: World,
    observation_id: int,
    steps_executed: int,
    *,
    images: Mapping[str, ImageArray] | None = None,
    ground_truth: bool = True,
) -> Observation:
    """Robot state of `world` now, with `images` (camera name -> RGB; none by default) and
    the objects' ground-truth poses (SIMULATOR ORACLE, for the scripted stand-in; a learned
    policy gets `ground_truth=False`: no poses, no scene name, as on a robot)."""
    position, rotation = world.ee_pose()
    objects = {}
    for body_id, name in world.object_of_body.items():
        if name in ("robot", "table") or not ground_truth:
            continue
        objects[name] = ObjectPose(
            np.array(world.data.xpos[body_id], dtype=np.float64), np.array(world.data.xquat[body_id], dtype=np.float64)
        )
    return Observation(
        observation_id=observation_id,
        stamp_s=world.time,
        robot=RobotState(position, rotation, world.arm_q(), world.gripper_width()),
        images=dict(images or {}),
        objects=objects,
        scene=world.scene.name if ground_truth else "",
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


# An object no task names moved farther than this between an episode's start and end is
# displaced (SafeLIBERO's violation), metres. The start is taken once objects have settled
# on their supports (they are placed 0.5 mm above them and sink ~0.3 mm into contact),
# SETTLED_S into the episode, long before the arm can reach anything.
DISPLACED_M = 0.001
SETTLED_S = 0.25


@dataclass
class EpisodeResult:
    success: bool
    steps: int
    completed: int = 0  # tasks completed, in order
    violations: list[Violation] = field(default_factory=list)  # contacts the tasks do not permit
    displaced: dict[str, float] = field(default_factory=dict)  # obstacle -> metres moved, those > DISPLACED_M
    infer_s: list[float] = field(default_factory=list)
    dropped_chunks: int = 0  # chunks the gate released nothing of

    @property
    def collided(self) -> bool:
        """A contact-based violation (ours): any contact the tasks do not permit."""
        return bool(self.violations)

    @property
    def displaced_any(self) -> bool:
        """A displacement-based violation (SafeLIBERO's): an obstacle moved > DISPLACED_M."""
        return bool(self.displaced)


def contact_task(world: World, script: Script, subtask_id: str) -> ContactTask:
    """The SetTask an executive would send for a scripted instruction: its object; the
    support it stands on (its container or plate, else the table); its destination (the
    table for lift-aside and push, which set the object down on / slide it along it: the
    whole table may be touched, where the demo's planner, naming no destination for "open
    the pink cover", allows only the support patch); and what the task implies besides
    (what a cover hides, the cover of the object). The shield's exemptions and the contact
    monitor both follow it."""
    source = inside_of(world, script.object) or "table"
    destination = script.destination or "table"
    related = {
        obj.name
        for obj in world.scene.spec.objects
        if covered_by(world, obj.name) == script.object or covered_by(world, script.object) == obj.name
    }
    permitted = tuple(sorted(related - {script.object, source, destination, ""}))
    return ContactTask(subtask_id, script.object, source, destination, permitted)


def bystanders(world: World, tasks: Sequence[ContactTask]) -> list[str]:
    """The objects no task names (target, source, destination, permitted contact), on the
    table (not offstage): the obstacles of SafeLIBERO's displacement metric. In our scenes
    the objects of role obstacle are fixed to the table (they never move, so only contact
    sees a collision with them); the free ones (a plate, the meat on it) can be displaced."""
    named = {n for t in tasks for n in (t.target, t.source, t.destination, *t.permitted)}
    return [o.name for o in world.scene.spec.objects if o.name not in named and not o.offstage]


@dataclass
class Displacements:
    """Where the watched objects were once settled (`SETTLED_S`), and how far they moved."""

    names: list[str]
    start: dict[str, np.ndarray] = field(default_factory=dict)  # name -> position (3,), metres

    def observe(self, world: World) -> None:
        """Call after every step: takes the start positions once the objects settled."""
        if not self.start and world.time >= SETTLED_S:
            self.start = {name: world.object_position(name).copy() for name in self.names}

    def displaced(self, world: World) -> dict[str, float]:
        """Objects moved more than DISPLACED_M from their start, metres (none before it)."""
        moved = {name: float(np.linalg.norm(world.object_position(name) - at)) for name, at in self.start.items()}
        return {name: distance for name, distance in moved.items() if distance > DISPLACED_M}


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


@dataclass(frozen=True)
class Sensors:
    """What an episode's observations carry besides robot state (see run_episode)."""

    cameras: Callable[[World], Mapping[str, ImageArray]] | None = None
    record: Callable[[World, Driver], None] | None = None
    ground_truth: bool = True


class _TaskPort:
    """The ChunkPort of one task: observations of `world` (with `cameras`' images, and
    ground truth when the policy needs it), chunks through the gate to the driver, one
    physics step per control step (`record` sees each, between the driver's command and
    the physics step), stop once success settled."""

    def __init__(
        self,
        world: World,
        driver: Driver,
        monitor: ContactMonitor,
        result: EpisodeResult,
        task: Task,
        *,
        watch: Displacements,
        gate: Callable[[Chunk, World], Chunk | None] | None,
        dt: float,
        settle_steps: int,
        sensors: Sensors,
    ) -> None:
        self.world, self.driver, self.monitor, self.result, self.task = world, driver, monitor, result, task
        self.watch = watch
        self.gate, self.dt, self.settle_steps = gate, dt, settle_steps
        self.sensors = sensors
        self.start = {o.name: world.object_position(o.name) for o in world.scene.spec.objects}
        self.settled = -1
        self.success = False

    def observe(self, steps_executed: int) -> tuple[float, Observation]:
        images = self.sensors.cameras(self.world) if self.sensors.cameras is not None else None
        seen = observe(
            self.world, self.result.steps, steps_executed, images=images, ground_truth=self.sensors.ground_truth
        )
        return self.world.time, seen

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
            if self.sensors.record is not None:
                self.sensors.record(world, self.driver)
            world.step(self.dt)
            self.monitor.update(world.model, world.data, world.object_of_body)
            self.watch.observe(world)
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
    cameras: Callable[[World], Mapping[str, ImageArray]] | None = None,
    record: Callable[[World, Driver], None] | None = None,
    setup: Callable[[World], None] | None = None,
) -> EpisodeResult:
    """Reset the world with `seed`, then run each task in turn (as the executive would:
    the next starts when the previous succeeded); stop at the first task that does not
    succeed within its `max_steps` control steps. Success is judged from ground truth
    after `settle_steps` more steps. `clock` times inference. `gate` (e.g. a shield) sees
    each chunk with the world and returns what to execute (None: nothing; the driver's
    watchdog then holds the arm). `cameras(world)` renders the images each observation
    carries (a learned policy's; None: no images); a policy that does not need ground
    truth gets no object poses. `record(world, driver)` runs every control step once the
    driver took its command, before physics advances (demonstration recording). `setup(world)`
    runs once after the reset (e.g. the cover lifted off beforehand)."""
    sensors = Sensors(cameras, record, policy.metadata.needs_ground_truth)
    world.reset(seed)
    if setup is not None:
        setup(world)
    driver = Driver(world, watchdog_s=0.25)
    monitor = ContactMonitor(known=frozenset(o.name for o in world.scene.spec.objects))
    contact_tasks = [contact_task(world, task.script, str(number)) for number, task in enumerate(tasks)]
    watch = Displacements(bystanders(world, contact_tasks))
    result = EpisodeResult(success=False, steps=0)
    for number, task in enumerate(tasks):
        monitor.set_task(contact_task(world, task.script, str(number)), world.time)  # as the world is now
        port = _TaskPort(
            world,
            driver,
            monitor,
            result,
            task,
            watch=watch,
            gate=gate,
            dt=dt,
            settle_steps=settle_steps,
            sensors=sensors,
        )
        policy.reset(task.instruction, seed * 100 + number)
        runner = ChunkRunner(
            policy, dt=dt, steps_per_inference=steps_per_inference, subtask_id=str(number), clock=clock
        )
        runner.run(port, task.max_steps)
        result.completed = number + 1 if port.success else number
        if not port.success:
            break
    monitor.finish(world.time)
    result.violations = list(monitor.violations)
    result.displaced = watch.displaced(world)
    result.success = result.completed == len(tasks)
    return result
