"""`carryon report --animation RUN_DIR`: `RUN_DIR/animation.gif`, the run replayed from its bag.

The frames are the scene camera's images as recorder_node kept them (`heavy_rate_hz`,
1 Hz by default); a bag without them (recorded before images were, or with the camera
topic left out) is rendered instead from its `joint_states` and the simulator's object
poses (`sim/truth`) with MuJoCo, from the same scene camera. Each frame carries the
user's request, the sim time, the active subtask's instruction and the shield's
decisions (`carryon_bringup.core.animation` composes them). Times are sim seconds (the
messages' header stamps), so the animation's clock is the one the nodes ran on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from ament_index_python.packages import get_package_share_directory
from rosbags.rosbag2 import Reader

from carryon_bringup.core.animation import (
    ImageArray,
    PlanMark,
    ShieldMark,
    compose_frame,
    overlay_at,
    pick_frames,
    write_gif,
)
from carryon_bringup.core.recorder import typestore_for

ANIMATION_FILE = "animation.gif"
FPS = 4.0  # frames a second; with the camera kept at 1 Hz, 4x the run's pace
MAX_BYTES = 2_000_000  # a GIF larger than this is written at a smaller scale
SCALES = (1.5, 1.25, 1.0)  # camera image scale factors, tried in turn until the GIF fits MAX_BYTES
RENDER_PERIOD_S = 1.0  # sim seconds between frames rendered from joint states (no camera in the bag)
_CAMERA = "/camera/scene/color"
_TOPICS = (_CAMERA, "/planner/plan_state", "/shield/events", "/joint_states", "/sim/truth")


@dataclass
class Recording:
    """What the animation needs from a bag; times are sim seconds."""

    images: list[tuple[float, ImageArray]] = field(default_factory=list)
    plan: list[PlanMark] = field(default_factory=list)
    shield: list[ShieldMark] = field(default_factory=list)
    joints: list[tuple[float, dict[str, float]]] = field(default_factory=list)  # kept every RENDER_PERIOD_S
    truth: list[tuple[float, str, dict[str, list[float]]]] = field(
        default_factory=list
    )  # (t, scene, name -> xyzw-quat pose)


@dataclass(frozen=True)
class AnimationResult:
    path: Path
    frames: int
    fps: float
    bytes: int
    scale: float
    source: str  # "camera" or "rendered"


def _stamp(msg: Any) -> float:
    return float(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)


def _names(msg: Any, prefix: str) -> dict[int, str]:
    """The message's `<prefix>*` constants as value -> lower-case name (e.g. STATE_ACTIVE -> active)."""
    return {int(getattr(msg, n)): n.removeprefix(prefix).lower() for n in dir(msg) if n.startswith(prefix)}


def _image(msg: Any) -> ImageArray | None:
    if msg.encoding not in ("rgb8", "bgr8", "rgba8", "bgra8"):
        return None
    channels = 4 if msg.encoding.endswith("a8") else 3
    rows = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.step)[:, : msg.width * channels]
    pixels = rows.reshape(msg.height, msg.width, channels)[..., :3]
    return np.ascontiguousarray(pixels[..., ::-1] if msg.encoding.startswith("bgr") else pixels)


def _pose_wxyz(pose: Any) -> list[float]:
    """x, y, z (m) and the quaternion w, x, y, z: a MuJoCo free joint's qpos."""
    p, q = pose.position, pose.orientation
    return [p.x, p.y, p.z, q.w, q.x, q.y, q.z]


def _plan_mark(msg: Any) -> PlanMark:
    states = _names(msg, "STATE_")
    active = next((s for s in msg.subtasks if s.subtask.id == msg.active_subtask_id), None)
    return PlanMark(
        t_s=_stamp(msg),
        request=msg.request,
        plan_state=states.get(int(msg.state), str(msg.state)),
        subtask_id=msg.active_subtask_id,
        instruction=(active.subtask.instruction or active.subtask.objective) if active else "",
        subtask_state=_names(active, "STATE_").get(int(active.state), "") if active else "",
    )


def read_recording(bag: Path) -> Recording:
    """The camera images, plan states, shield decisions (and, for rendering, joint states and
    object poses every RENDER_PERIOD_S) of a rosbag2 folder, in time order."""
    store = typestore_for([Path(get_package_share_directory("carryon_interfaces"))])
    rec = Recording()
    next_joints = next_truth = -1.0
    with Reader(bag) as reader:
        wanted = [c for c in reader.connections if c.topic.endswith(_TOPICS)]
        for connection, _, raw in reader.messages(connections=wanted):
            msg = store.deserialize_cdr(raw, connection.msgtype)
            topic, t = connection.topic, _stamp(msg)
            if topic.endswith(_CAMERA):
                image = _image(msg)
                if image is not None:
                    rec.images.append((t, image))
            elif topic.endswith("/planner/plan_state"):
                rec.plan.append(_plan_mark(msg))
            elif topic.endswith("/shield/events"):
                decision = _names(msg, "DECISION_").get(int(msg.decision), f"decision_{msg.decision}")
                rec.shield.append(
                    ShieldMark(t, decision, msg.released_steps, msg.total_steps, msg.blocking_obstacle, msg.reason)
                )
            elif topic.endswith("/joint_states") and t >= next_joints:
                rec.joints.append((t, dict(zip(msg.name, (float(q) for q in msg.position), strict=False))))
                next_joints = t + RENDER_PERIOD_S
            elif topic.endswith("/sim/truth") and t >= next_truth:
                poses = {o.name: _pose_wxyz(o.pose) for o in msg.objects}
                rec.truth.append((t, msg.scene, poses))
                next_truth = t + RENDER_PERIOD_S
    for series in (rec.images, rec.joints, rec.truth):
        series.sort(key=lambda item: item[0])
    rec.plan.sort(key=lambda p: p.t_s)
    rec.shield.sort(key=lambda s: s.t_s)
    return rec


def rendered_images(rec: Recording) -> Iterator[tuple[float, ImageArray]]:
    """The scene camera's view of each kept joint state, rendered with MuJoCo: the arm from
    `joint_states`, the objects where `sim/truth` last put them. Needs the run's scene file
    (`$CARRYON_CONFIG_DIR/scenes/<scene>.yaml`) and a simulation run (sim/truth in the bag)."""
    import mujoco

    from carryon_sim.core.cameras import CameraRig
    from carryon_sim.core.scene import load_scene, scene_path, scenes_dir
    from carryon_sim.core.world import ARM_JOINTS, SCENE_CAMERA, URDF_FINGER_JOINTS, World

    if not rec.truth:
        raise ValueError("the bag has no camera images and no sim/truth to render a scene from")
    world = World(load_scene(scene_path(scenes_dir(), rec.truth[0][1])))
    rig = CameraRig(world.model, world.object_of_body, 256, 256, detailed=True)
    truth_times = [t for t, _, _ in rec.truth]
    try:
        for t, joints in rec.joints:
            _, _, poses = rec.truth[max(0, int(np.searchsorted(truth_times, t, side="right")) - 1)]
            for name, pose in poses.items():
                body = world.model.body(name)
                if body.jntnum[0] == 1:  # free joint
                    adr = world.model.jnt_qposadr[body.jntadr[0]]
                    world.data.qpos[adr : adr + 7] = pose
            world.data.qpos[world.robot.arm_qpos] = [joints.get(n, 0.0) for n in ARM_JOINTS]
            fingers = [joints.get(n, 0.0) for n in URDF_FINGER_JOINTS]
            world.data.qpos[world.robot.finger_qpos] = [fingers[0], -fingers[1]]
            mujoco.mj_forward(world.model, world.data)
            yield t, rig.render(world.data, SCENE_CAMERA, segmentation=False, depth=False).rgb
    finally:
        rig.close()


def _busy(t_s: float, rec: Recording) -> bool:
    """Whether the robot is doing something at `t_s`: a subtask is active, or the shield
    decided on a chunk within the last two seconds."""
    now = [p for p in rec.plan if p.t_s <= t_s]
    return bool(now and now[-1].subtask_id) or any(t_s - 2.0 <= s.t_s <= t_s for s in rec.shield)


def write_animation(run_dir: Path, fps: float = FPS, max_bytes: int = MAX_BYTES) -> AnimationResult:
    """Write `run_dir/animation.gif` from `run_dir/bag`; see the module docstring. Idle
    stretches (no subtask, no shield decision) are shown at a quarter of the frames; the GIF
    is written at the largest of SCALES that fits `max_bytes` (the smallest if none does)."""
    rec = read_recording(run_dir / "bag")
    source = "camera" if rec.images else "rendered"
    images = rec.images or list(rendered_images(rec))
    if not images:
        raise ValueError(f"{run_dir / 'bag'}: no camera images and no joint states to render")
    times = [t for t, _ in images]
    keep = pick_frames(times, [_busy(t, rec) for t in times])
    span = (times[keep[0]], times[keep[-1]])
    path = run_dir / ANIMATION_FILE
    size, scale = 0, SCALES[0]
    for scale in SCALES:
        frames = []
        for n, i in enumerate(keep):
            since = times[keep[n - 1]] if n else times[i] - 1.0
            overlay = overlay_at(times[i], since, rec.plan, rec.shield)
            frames.append(compose_frame(images[i][1], overlay, span, rec.shield, scale=scale))
        size = write_gif(frames, path, fps)
        if size <= max_bytes:
            break
    return AnimationResult(path, len(keep), fps, size, scale, source)
