"""Evaluation frames for perception (`carryon bench perception`): both cameras rendered
from the simulator with their TRUTH segmentation, the arm's joint positions, the gripper
width and the path the gripper is about to follow. Simulation harness only: the truth
here grades perception and is never shown to it.

Situations, per scene (food_serving, safety) and seed:
- `episode`: frames along a scripted stand-in episode (`sim_scripted`; food: open the
  cover, then the carrot into the bowl; safety: the cube into the bowl, with obstacle_3
  placed on the path at odd seeds), every `episode_stride`-th inference. The arm passes
  between the cameras and the objects, carries the cover / carrot / cube, lifts the cover.
- `home`: the arm at home, the default scene (the cover hides the carrot, meat on the plate).
- `uncovered` (food): the cover lifted off the carrot and set down beside it.
- `touching`: the carrot (food) / the cube (safety) resting inside the bowl.
- `arm_occluding`: arm poses (IK) with the tool between the scene camera and an object.
- `carried`: an object between the closed fingers, the arm above the table (kinematic).
- `placed_obstacle` (safety): obstacle_3 put in the middle of the carry path.
Each frame names its `target`, the object its subtask acts on (an episode's current
instruction's object; a set-up's object the path leads to or that is carried; none for
`arm_occluding`: the hidden object stays an obstacle), and what the gripper holds.
Each frame also lists what truth says holds (`situations`): carried, covered, uncovered,
touching (an object rests in or on another), arm_occluding (an object's centre hidden by the arm in
the scene camera).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import mujoco
import numpy as np
import numpy.typing as npt

from carryon_common.core.chunk import Chunk, tool_targets
from carryon_policy.core.backends import make_policy
from carryon_policy.core.config import PolicyConfig
from carryon_sim.core.cameras import CameraFrame, CameraRig
from carryon_sim.core.contacts import ROBOT, grasped_objects
from carryon_sim.core.ik import ArmIk
from carryon_sim.core.objects import Role
from carryon_sim.core.predicates import covered_by, inside_of
from carryon_sim.core.scene import TABLE_TOP_Z, PerturbationSpec, Scene, load_scene, scenes_dir
from carryon_sim.core.world import HOME_Q, World
from carryon_sim.harness.episodes import Task, run_episode
from carryon_sim.harness.shield_gate import CAMERAS
from carryon_sim.harness.stand_in.scripts import stand_in_script

FloatArray = npt.NDArray[np.float64]

SCENES = ("food_serving", "safety")
EPISODE_TASKS = {
    "food_serving": ("open the pink cover", "put the carrot in the bowl"),
    "safety": ("put the cube in the bowl",),
}
# The object each static set-up reaches for (the first task's) and carries, and where to.
TARGET = {"food_serving": "pink_cover", "safety": "cube"}
CARRIED = {"food_serving": ("meat", 0.05), "safety": ("cube", 0.04)}  # object, width between the fingers (m)
IN_BOWL = {"food_serving": "carrot", "safety": "cube"}
PATH_HORIZON_S = 1.0  # how far ahead an episode frame's gripper path reaches, seconds
STEPS_PER_INFERENCE = 8
HAND_ABOVE_TCP_M = 0.08  # the hand's palm above the tool centre point (fingertips), gripper down


@dataclass(frozen=True)
class PerceptionFrame:
    """One evaluation frame. `cameras`: by consumer name (`scene`, `wrist`), with truth
    segmentation; `joints`: arm (radians) and finger (metres from the centre line) joint
    positions by the URDF's names, as joint_states carries them; `gripper_path`: (N, 3)
    polyline (N >= 1) the tool centre point follows from now, metres, `world`;
    `sequence`: frames of one sequence are consecutive in time (one perception instance
    may track through them); `held`: objects between the fingers (truth); `target`: the
    object the subtask acts on (the shield exempts it), '' for none."""

    scene: str
    seed: int
    sequence: str
    tag: str
    situations: tuple[str, ...]
    stamp_s: float
    cameras: dict[str, CameraFrame]
    joints: dict[str, float]
    gripper_width_m: float
    gripper_path: FloatArray
    held: tuple[str, ...] = ()
    target: str = ""


@dataclass(frozen=True)
class FramePlan:
    """Which frames to make: per scene and seed, every `episode_stride`-th inference of
    an episode (0: no episodes) and `occluding_poses` arm poses in front of objects."""

    seeds: tuple[int, ...]
    episode_stride: int
    occluding_poses: int
    scenes: tuple[str, ...] = SCENES


def frame_plan(quick: bool, seed: int) -> FramePlan:
    """The benchmark's plan: 5 seeds (about 210 frames), or 1 seed with sparser episodes
    (about 20 frames) for `quick`."""
    first = seed * 1000
    if quick:
        return FramePlan((first,), episode_stride=6, occluding_poses=1)
    return FramePlan(tuple(range(first, first + 5)), episode_stride=2, occluding_poses=3)


@dataclass(frozen=True)
class _Snapshot:
    qpos: FloatArray
    qvel: FloatArray
    time: float
    body_pos: FloatArray
    path: FloatArray
    target: str


@dataclass
class _Recorder:
    """The `gate` of run_episode that passes every chunk and keeps the state it saw, with
    the target of the chunk's subtask (`targets`: per task, in order)."""

    targets: tuple[str, ...]
    snapshots: list[_Snapshot] = field(default_factory=list)

    def __call__(self, chunk: Chunk, world: World) -> Chunk:
        position, rotation = world.ee_pose()
        ahead = [t.position for t in tool_targets(chunk, position, rotation)[: int(PATH_HORIZON_S / chunk.dt)]]
        path = np.vstack([position, *ahead]) if ahead else position[None, :]
        state = (world.data.qpos.copy(), world.data.qvel.copy(), world.time, world.model.body_pos.copy())
        self.snapshots.append(_Snapshot(*state, path=path, target=self.targets[int(chunk.subtask_id)]))
        return chunk


class _Camera:
    """Renders a world's frames (one rig per world, closed by `close`)."""

    def __init__(self, world: World, size: tuple[int, int]) -> None:
        self.world = world
        self.rig = CameraRig(world.model, world.object_of_body, *size)

    def close(self) -> None:
        self.rig.close()

    def frame(self, seed: int, sequence: str, tag: str, path: FloatArray, target: str) -> PerceptionFrame:
        world = self.world
        cameras = {name: self.rig.render(world.data, mujoco_name) for name, mujoco_name in CAMERAS.items()}
        held = tuple(sorted(grasped_objects(world.model, world.data, world.object_of_body)))
        return PerceptionFrame(
            scene=world.scene.name,
            seed=seed,
            sequence=sequence,
            tag=tag,
            situations=situations(world, cameras["scene"], held),
            stamp_s=world.time,
            cameras=cameras,
            joints=world.joint_states(),
            gripper_width_m=world.gripper_width(),
            gripper_path=np.asarray(path, dtype=np.float64).reshape(-1, 3),
            held=held,
            target=target,
        )


def situations(world: World, scene_view: CameraFrame, held: tuple[str, ...]) -> tuple[str, ...]:
    """What truth says holds now (see the module docstring)."""
    out = ["carried"] if held else []
    covers = world.objects_with_role(Role.COVER)
    if covers:
        hidden = any(covered_by(world, o.name) for o in world.scene.spec.objects)
        out.append("covered" if hidden else "uncovered")
    if any(inside_of(world, o.name) for o in world.scene.spec.objects):
        out.append("touching")
    if arm_occluded(world, scene_view):
        out.append("arm_occluding")
    return tuple(out)


def arm_occluded(world: World, view: CameraFrame) -> list[str]:
    """Objects whose centre (base + half height) the arm hides in `view`."""
    robot_ids = [i for i, name in view.labels.items() if name == ROBOT]
    camera_from_world = np.linalg.inv(view.world_from_camera)
    height, width = view.segmentation.shape
    hidden = []
    for obj in world.scene.spec.objects:
        centre = world.object_position(obj.name) + np.array([0.0, 0.0, 0.5 * obj.kind.height_m * obj.scale])
        p = camera_from_world[:3, :3] @ centre + camera_from_world[:3, 3]
        if p[2] <= 0.0:
            continue
        u, v = (view.K @ (p / p[2]))[:2]
        col, row = round(u), round(v)
        if 0 <= row < height and 0 <= col < width and int(view.segmentation[row, col]) in robot_ids:
            hidden.append(obj.name)
    return hidden


def _restore(world: World, snap: _Snapshot) -> None:
    world.data.qpos[:] = snap.qpos
    world.data.qvel[:] = snap.qvel
    world.data.time = snap.time
    world.model.body_pos[:] = snap.body_pos
    mujoco.mj_forward(world.model, world.data)


def _with_placed_obstacle(scene: Scene) -> Scene:
    place = PerturbationSpec(kind="place", object="obstacle_3", location="path_middle")
    return Scene(scene.path, scene.spec.model_copy(update={"perturbations": [place]}))


def _episode_frames(camera: _Camera, tasks: list[Task], seed: int, stride: int) -> Iterator[PerceptionFrame]:
    world = camera.world
    recorder = _Recorder(tuple(t.script.object for t in tasks))
    policy = make_policy(PolicyConfig(backend="sim_scripted"))
    run_episode(world, policy, tasks, seed, steps_per_inference=STEPS_PER_INFERENCE, gate=recorder)
    sequence = f"{world.scene.name}/{seed}/episode"
    for snap in recorder.snapshots[::stride]:
        _restore(world, snap)
        yield camera.frame(seed, sequence, "episode", snap.path, snap.target)


def _segment_to(world: World, name: str, above_m: float = 0.05) -> FloatArray:
    """The straight path from the tool now to `above_m` over an object's top."""
    obj = world.scene.object(name)
    top = world.object_position(name) + np.array([0.0, 0.0, obj.kind.height_m * obj.scale + above_m])
    return np.vstack([world.ee_pose()[0], top])


def _pose_arm(world: World, q: FloatArray) -> None:
    world.data.qpos[world.robot.arm_qpos] = q
    world.set_arm_target(q)
    mujoco.mj_forward(world.model, world.data)


def _occluding_pose(world: World, ik: ArmIk, rng: np.random.Generator) -> str | None:
    """Put the tool between the scene camera and a random object on the table; the object,
    or None when no pose within 5 mm was found."""
    _, down = world.ee_pose()
    on_table = [o.name for o in world.scene.spec.objects if world.object_position(o.name)[2] > TABLE_TOP_Z - 0.05]
    name = str(rng.choice(on_table))
    obj = world.scene.object(name)
    centre = world.object_position(name) + np.array([0.0, 0.0, 0.5 * obj.kind.height_m * obj.scale])
    camera = world.data.cam_xpos[world.model.camera(CAMERAS["scene"]).id]
    toward = (camera - centre) / np.linalg.norm(camera - centre)
    for _ in range(5):
        # The palm (about HAND_ABOVE_TCP_M over the tool centre point) on the line of sight.
        target = centre + rng.uniform(0.12, 0.25) * toward + [0.0, rng.uniform(-0.03, 0.03), -HAND_ABOVE_TCP_M]
        target[2] = max(target[2], TABLE_TOP_Z + 0.04)
        solved = ik.solve(np.asarray(HOME_Q), target, down, max_iterations=200)
        if solved.position_error_m < 0.005:
            _pose_arm(world, solved.q)
            return name
    return None


def _carry(world: World, ik: ArmIk, rng: np.random.Generator, name: str, width_m: float) -> bool:
    """The tool over the table with `name` between the fingers closed to `width_m`."""
    _, down = world.ee_pose()
    target = np.array([rng.uniform(0.42, 0.62), rng.uniform(-0.2, 0.2), TABLE_TOP_Z + rng.uniform(0.18, 0.3)])
    solved = ik.solve(np.asarray(HOME_Q), target, down, max_iterations=200)
    if solved.position_error_m >= 0.005:
        return False
    _pose_arm(world, solved.q)
    tcp, rotation = world.ee_pose()
    body = world.model.body(name)
    adr = world.model.jnt_qposadr[body.jntadr[0]]
    grip_centre = 0.5 * world.scene.object(name).kind.height_m * world.scene.object(name).scale
    yaw = float(np.arctan2(rotation[1, 0], rotation[0, 0])) - np.pi / 2  # the object's y along the fingers (site x)
    world.data.qpos[adr : adr + 7] = [*(tcp - [0.0, 0.0, grip_centre]), np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
    world.data.qpos[world.robot.finger_qpos] = [width_m / 2, -width_m / 2]
    world.set_gripper(1.0)
    mujoco.mj_forward(world.model, world.data)
    return True


def _static_frames(camera: _Camera, seed: int, occluding: int) -> Iterator[PerceptionFrame]:
    world, scene = camera.world, camera.world.scene.name
    rng = np.random.default_rng(seed)
    ik = ArmIk(world.model, world.robot)
    target = TARGET[scene]

    def fresh(tag: str) -> str:
        world.reset(seed)
        return f"{scene}/{seed}/{tag}"

    sequence = fresh("home")
    yield camera.frame(seed, sequence, "home", _segment_to(world, target), target)
    if world.objects_with_role(Role.COVER):
        sequence = fresh("uncovered")
        world.uncover(target)
        world.step(0.3)
        yield camera.frame(seed, sequence, "uncovered", _segment_to(world, "carrot"), "carrot")
    sequence = fresh("touching")
    item = IN_BOWL[scene]
    bowl = world.object_position("bowl")
    world.displace(item, *(bowl + np.array([0.0, 0.0, 0.01]) - world.object_position(item)))
    world.step(0.5)
    yield camera.frame(seed, sequence, "touching", _segment_to(world, item), item)
    for k in range(occluding):
        sequence = fresh(f"arm_occluding_{k}")
        name = _occluding_pose(world, ik, rng)
        if name is not None:
            yield camera.frame(seed, sequence, "arm_occluding", _segment_to(world, name, above_m=0.0), "")
    sequence = fresh("carried")
    held, width = CARRIED[scene]
    if _carry(world, ik, rng, held, width):
        yield camera.frame(seed, sequence, "carried", _segment_to(world, "bowl"), held)
    if scene == "safety":
        sequence = fresh("placed_obstacle")
        world.place("obstacle_3", "path_middle")
        path = np.vstack([world.ee_pose()[0], _segment_to(world, "cube")[1], _segment_to(world, "bowl")[1]])
        yield camera.frame(seed, sequence, "placed_obstacle", path, "cube")


def perception_frames(
    plan: FramePlan, *, size: tuple[int, int] = (256, 256), scenes: Path | None = None
) -> Iterator[PerceptionFrame]:
    """The plan's frames rendered at `size` (width, height), scene by scene and seed by
    seed (deterministic for a plan). `scenes`: the scene folder (default: config/scenes)."""
    folder = scenes or scenes_dir()
    for scene_name in plan.scenes:
        scene = load_scene(folder / f"{scene_name}.yaml")
        tasks = [Task(i, stand_in_script(i), max_steps=400) for i in EPISODE_TASKS[scene_name]]
        worlds = [World(scene, seed=plan.seeds[0])]
        if scene_name == "safety" and plan.episode_stride:
            worlds.append(World(_with_placed_obstacle(scene), seed=plan.seeds[0]))
        cameras = [_Camera(w, size) for w in worlds]
        try:
            for seed in plan.seeds:
                if plan.episode_stride:
                    yield from _episode_frames(cameras[seed % len(cameras)], tasks, seed, plan.episode_stride)
                yield from _static_frames(cameras[0], seed, plan.occluding_poses)
        finally:
            for camera in cameras:
                camera.close()
