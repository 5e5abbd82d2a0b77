"""A stand-in for an arm cell's camera drivers: RGB-D images of the simulated food scene
under the topics, encodings and frames of real drivers (realsense2_camera with
align_depth), for tests and dry runs of the `robot` profile without cameras.

NOT A CAMERA, and not part of the robot graph: it plays the real world on the test's side.
For each camera of a cameras file (the one arm_adapter_node bridges, `config/arm/cameras.yaml`)
it publishes on the file's *driver* topics

* colour: `sensor_msgs/Image` rgb8 (or bgr8 with `--bgr`), best effort like most drivers;
* aligned depth: `sensor_msgs/Image` 16UC1 in units of the file's `depth_scale` (millimetres
  for a RealSense), 0 = no return;
* camera_info: intrinsics of the colour (= aligned depth) image, reliable;

colour and depth of one frame carry one stamp, the instant the arm was where it is drawn
(the stamp of the joint state it is posed from, or the node clock when the controller has
been silent for `STILL_AFTER_S`: the arm then stands where it was), and the driver's own
optical frame id (`<camera>_camera_color_optical_frame`). The scene is
drawn with the arm posed from the joint states the arm's controller publishes
(`--joint-states-topic`, by the URDF's joint names), so the images agree with the robot's
state as real cameras would; nothing is published before the first joint state. The
simulated cameras are placed where the file's calibration says the real ones are (`mount:
world` in `world`, `mount: tool` on the tool centre point), so the poses arm_adapter_node
publishes for them are right. Objects stay where the scene puts them for `--seed`.
`write_simulated_calibration` writes a cameras file whose poses are the simulator's own
cameras (the views perception's simulated catalog was made from).

    python -m carryon_sim.harness.fakes.camera_driver [--cameras-file arm/cameras.yaml] \
        [--scene food_serving] [--seed 0] [--rate-hz 5] [--width 256 --height 256] [--ros-args ...]
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import yaml
from pydantic import BaseModel, ConfigDict, Field
from scipy.spatial.transform import Rotation

from carryon_common.core.config import load_yaml_model, read_yaml, under_config_dir
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.scene import load_scene, scene_path, scenes_dir
from carryon_sim.core.world import ARM_JOINTS, EE_SITE, SCENE_CAMERA, URDF_FINGER_JOINTS, WRIST_CAMERA, World

FloatArray = npt.NDArray[np.float64]
# The simulator's camera that plays each camera name CarryOn reads.
SIMULATED = {"scene": SCENE_CAMERA, "wrist": WRIST_CAMERA}
STILL_AFTER_S = 0.5  # no joint state for this long: the controller is silent, the arm stands still
# A MuJoCo camera looks along -z with y up; an optical frame looks along +z with y down.
_OPTICAL_TO_MUJOCO = np.diag([1.0, -1.0, -1.0])


class DriverCamera(BaseModel):
    """What the stand-in needs of one entry of a cameras file (the rest is the adapter's)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    color: str = Field(description="colour image topic")
    depth: str = Field(description="aligned depth image topic")
    camera_info: str = Field(description="camera_info topic")
    depth_scale: float = Field(0.001, gt=0.0, description="metres per 16UC1 depth unit")
    mount: Literal["world", "tool"] = Field(description="pose in 'world' or on the tool centre point")
    xyz: tuple[float, float, float] = Field(description="optical frame position, metres")
    rpy: tuple[float, float, float] = Field(description="optical frame roll-pitch-yaw, radians (as the adapter)")

    def optical_pose(self) -> FloatArray:
        """4x4 pose of the optical frame in its mount (the adapter's convention: extrinsic xyz)."""
        pose = np.eye(4)
        pose[:3, :3] = Rotation.from_euler("xyz", list(self.rpy)).as_matrix()
        pose[:3, 3] = self.xyz
        return pose


class DriverCameras(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    cameras: dict[str, DriverCamera]


@dataclass(frozen=True)
class DriverFrame:
    """One camera's frame as its driver sends it. rgb: (H, W, 3) uint8; depth: (H, W) uint16
    in `depth_scale` units (0 = no return); K: 3x3 intrinsics, pixels."""

    camera: str
    rgb: npt.NDArray[np.uint8]
    depth: npt.NDArray[np.uint16]
    K: FloatArray


def _pose(position: FloatArray, rotation: FloatArray) -> FloatArray:
    pose = np.eye(4)
    pose[:3, :3], pose[:3, 3] = rotation, position
    return pose


class CameraCell:
    """The simulated scene seen by the cameras of a cameras file, the arm posed from joint
    positions. No ROS. Call `close()` when done (it owns an OpenGL context: use it from one thread)."""

    def __init__(self, cameras: Mapping[str, DriverCamera], scene: str, seed: int, width: int, height: int) -> None:
        unknown = sorted(set(cameras) - set(SIMULATED))
        if unknown:
            raise ValueError(f"cameras {unknown}: the stand-in simulates only {sorted(SIMULATED)}")
        self.cameras = dict(cameras)
        self.world = World(load_scene(scene_path(scenes_dir(), scene)), seed=seed)
        self._place_cameras()
        self.rig = CameraRig(self.world.model, self.world.object_of_body, width, height)

    def _place_cameras(self) -> None:
        """Move each simulated camera to the calibrated pose of the file (its mount is rigid,
        so the pose relative to the camera's body, taken at the start pose, holds for every pose)."""
        import mujoco  # here, not at the top: carryon_sim.core.cameras chose the headless GL first

        model, data = self.world.model, self.world.data
        site = model.site(EE_SITE).id
        tool = _pose(data.site_xpos[site], data.site_xmat[site].reshape(3, 3))
        for name, source in self.cameras.items():
            cam = model.camera(SIMULATED[name]).id
            body = int(model.cam_bodyid[cam])
            world_from_body = _pose(data.xpos[body], data.xmat[body].reshape(3, 3))
            mount = tool if source.mount == "tool" else np.eye(4)
            body_from_optical = np.linalg.inv(world_from_body) @ mount @ source.optical_pose()
            x, y, z, w = Rotation.from_matrix(body_from_optical[:3, :3] @ _OPTICAL_TO_MUJOCO).as_quat()
            model.cam_pos[cam] = body_from_optical[:3, 3]
            model.cam_quat[cam] = [w, x, y, z]
            model.cam_mode[cam] = mujoco.mjtCamLight.mjCAMLIGHT_FIXED
        mujoco.mj_forward(model, data)

    def pose_arm(self, joints: Mapping[str, float]) -> None:
        """Arm joints (radians) and finger joints (metres from the hand's centre line) by the
        URDF's names; a finger not given keeps its position."""
        import mujoco

        world = self.world
        q = world.data.qpos
        q[world.robot.arm_qpos] = [joints[name] for name in ARM_JOINTS]
        fingers = world.robot.finger_qpos
        for index, (name, sign) in enumerate(zip(URDF_FINGER_JOINTS, (1.0, -1.0), strict=True)):
            if name in joints:
                q[fingers[index]] = sign * joints[name]
        mujoco.mj_kinematics(world.model, world.data)
        mujoco.mj_camlight(world.model, world.data)

    def render(self, joints: Mapping[str, float]) -> list[DriverFrame]:
        """Every camera's frame with the arm at `joints` (see `pose_arm`)."""
        self.pose_arm(joints)
        frames = []
        for name, source in self.cameras.items():
            frame = self.rig.render(self.world.data, SIMULATED[name])
            units = np.rint(frame.depth / source.depth_scale)  # 0 where nothing was hit stays 0
            depth = np.clip(units, 0, np.iinfo(np.uint16).max).astype(np.uint16)
            frames.append(DriverFrame(name, frame.rgb, depth, frame.K))
        return frames

    def close(self) -> None:
        self.rig.close()


def load_cameras(path: Path) -> dict[str, DriverCamera]:
    return dict(load_yaml_model(DriverCameras, path).cameras)


def write_simulated_calibration(cameras_file: Path, out: Path, scene: str = "food_serving", seed: int = 0) -> Path:
    """`cameras_file` (a cameras file of arm_adapter_node) with each camera's calibration
    replaced by where the simulator's camera of that name is: the scene camera fixed in
    `world`, the wrist camera on the tool centre point. What calibrating the stand-in cell
    would measure; its images then match the simulator's own (and its perception catalog's
    views). Topics, frames and depth scale are kept. Returns `out`."""
    raw = read_yaml(cameras_file)
    world = World(load_scene(scene_path(scenes_dir(), scene)), seed=seed)
    model, data = world.model, world.data
    site = model.site(EE_SITE).id
    tool = _pose(data.site_xpos[site], data.site_xmat[site].reshape(3, 3))
    for name, entry in raw["cameras"].items():
        cam = model.camera(SIMULATED[name]).id
        world_from_optical = _pose(data.cam_xpos[cam], data.cam_xmat[cam].reshape(3, 3) @ _OPTICAL_TO_MUJOCO)
        mount = "world" if int(model.cam_bodyid[cam]) == 0 else "tool"
        pose = world_from_optical if mount == "world" else np.linalg.inv(tool) @ world_from_optical
        entry.update(
            mount=mount,
            xyz=[round(float(v), 6) for v in pose[:3, 3]],
            rpy=[round(float(v), 6) for v in Rotation.from_matrix(pose[:3, :3]).as_euler("xyz")],
        )
    header = f"# {cameras_file} with the simulated cell's camera poses ({scene}): written by {__name__}\n"
    out.write_text(header + yaml.safe_dump(raw, sort_keys=False, default_flow_style=None))
    return out


def _run(args: argparse.Namespace, ros_args: Sequence[str]) -> None:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.node import Node
    from rclpy.qos import qos_profile_sensor_data
    from rclpy.signals import SignalHandlerOptions
    from sensor_msgs.msg import CameraInfo, Image, JointState  # type: ignore[import-untyped]  # ROS: no stubs

    cameras = load_cameras(under_config_dir(args.cameras_file))
    cell = CameraCell(cameras, args.scene, args.seed, args.width, args.height)
    rclpy.init(args=["camera_driver", *ros_args], signal_handler_options=SignalHandlerOptions.NO)
    node = Node("camera_driver")
    latest: dict[str, float] = {}
    posed_at: list[Any] = [None, 0.0]  # the stamp of the arm's latest joint state, and when it came
    lock = threading.Lock()
    seen = threading.Event()

    def on_joints(msg: Any) -> None:  # JointState; arm and gripper may come in separate messages
        with lock:
            latest.update(zip(msg.name, (float(p) for p in msg.position), strict=False))
            if any(name in msg.name for name in ARM_JOINTS):
                posed_at[:] = [msg.header.stamp, time.monotonic()]
            if all(name in latest for name in ARM_JOINTS):
                seen.set()

    node.create_subscription(JointState, args.joint_states_topic, on_joints, qos_profile_sensor_data)
    publishers = {
        name: (
            node.create_publisher(Image, source.color, qos_profile_sensor_data),
            node.create_publisher(Image, source.depth, qos_profile_sensor_data),
            node.create_publisher(CameraInfo, source.camera_info, 10),
        )
        for name, source in cameras.items()
    }
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, name="camera-driver-ros", daemon=True)
    spinner.start()
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    node.get_logger().warning(f"camera_driver is NOT A CAMERA: {args.scene} rendered for {sorted(cameras)}")
    period = 1.0 / args.rate_hz
    try:
        next_s = time.monotonic()
        while not stop.is_set():
            if seen.is_set():
                with lock:
                    joints, (arm_stamp, came_s) = dict(latest), posed_at
                # The exposure: when the arm was where it is drawn. Joint states late on a busy
                # machine would otherwise put an old arm in a new image (a robot beside itself).
                flowing = time.monotonic() - came_s < STILL_AFTER_S and arm_stamp is not None
                stamp = arm_stamp if flowing else node.get_clock().now().to_msg()
                for frame in cell.render(joints):
                    color_pub, depth_pub, info_pub = publishers[frame.camera]
                    frame_id = f"{frame.camera}_camera_color_optical_frame"
                    rgb = frame.rgb[:, :, ::-1] if args.bgr else frame.rgb
                    color_pub.publish(_image(Image, rgb, "bgr8" if args.bgr else "rgb8", frame_id, stamp))
                    depth_pub.publish(_image(Image, frame.depth, "16UC1", frame_id, stamp))
                    info_pub.publish(_camera_info(CameraInfo, frame, frame_id, stamp))
            next_s = max(next_s + period, time.monotonic())  # late frames are skipped, not caught up
            stop.wait(next_s - time.monotonic())
    finally:
        executor.shutdown(timeout_sec=2.0)
        node.destroy_node()
        rclpy.try_shutdown()
        spinner.join(timeout=2.0)
        cell.close()


def _image(image_type: Any, array: npt.NDArray[np.generic], encoding: str, frame_id: str, stamp: Any) -> Any:
    """A sensor_msgs/Image of an (H, W, 3) uint8 or (H, W) array, little-endian."""
    contiguous = np.ascontiguousarray(array)
    msg = image_type(height=array.shape[0], width=array.shape[1], encoding=encoding, is_bigendian=0)
    msg.step, msg.data = contiguous.strides[0], contiguous.tobytes()
    msg.header.stamp, msg.header.frame_id = stamp, frame_id
    return msg


def _camera_info(info_type: Any, frame: DriverFrame, frame_id: str, stamp: Any) -> Any:
    """A pinhole CameraInfo without distortion, as a driver publishes for rectified colour."""
    height, width = frame.depth.shape
    k = frame.K
    info = info_type(height=height, width=width, distortion_model="plumb_bob")
    info.header.stamp, info.header.frame_id = stamp, frame_id
    info.k = [float(v) for v in k.ravel()]
    info.d = [0.0] * 5
    info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    info.p = [float(k[0, 0]), 0.0, float(k[0, 2]), 0.0, 0.0, float(k[1, 1]), float(k[1, 2]), 0.0, 0.0, 0.0, 1.0, 0.0]
    return info


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--cameras-file",
        default="arm/cameras.yaml",
        help="cameras file of arm_adapter_node: driver topics and calibrated poses (relative to the config folder)",
    )
    parser.add_argument("--scene", default="food_serving", help="scene of config/scenes/ (default food_serving)")
    parser.add_argument("--seed", type=int, default=0, help="the scene's placement seed (default 0)")
    parser.add_argument("--rate-hz", type=float, default=5.0, help="frames per second per camera (default 5)")
    parser.add_argument("--width", type=int, default=256, help="image width, pixels (default 256)")
    parser.add_argument("--height", type=int, default=256, help="image height, pixels (default 256)")
    parser.add_argument("--joint-states-topic", default="/joint_states", help="the arm controller's joint states")
    parser.add_argument("--bgr", action="store_true", help="colour as bgr8 (default rgb8)")
    argv = list(argv) if argv is not None else None
    args, ros_args = parser.parse_known_args(argv)
    if args.rate_hz <= 0:
        parser.error("--rate-hz must be > 0")
    _run(args, ros_args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
