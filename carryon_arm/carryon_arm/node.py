"""arm_adapter_node: a real arm behind ros2_control (or any controller) as CarryOn's robot driver.

It replaces sim_node in the `robot` profile. It executes only the shielded command topic
(`shield/chunk`), one step per control period, as either a `trajectory_msgs/JointTrajectory`
(IK from the URDF with Pinocchio) or a `geometry_msgs/PoseStamped` tool target for your
controller; holds the arm on the watchdog, on e-stop, on stale joint states and on a
step it refuses (reason on `driver/rejections`); and publishes what the graph reads:
`joint_states`, `ee_pose` (forward kinematics of the measured joints), `gripper/width`,
and — from a cameras file — your camera drivers' images as `camera/<name>/...`.

Only joint states the executor's JointStateGate accepted are used (core/joint_states.py): one
that jumps further than the arm can move is refused, reported on `driver/rejections` (at most
once a second) and counted in the status. While more than `max_joint_state_publishers`
publishers are matched on the joint-states topic (a second joint_state_publisher, a GUI
slider, another robot's driver) chunks are refused, the arm holds and the node is DEGRADED.

Stamps are the instants things were measured: joint states and ee_pose keep your
controller's stamp (the node clock on receipt only when it sends none), and each camera's
pose is published at its image's stamp, a tool-mounted camera placed at the tool pose
measured nearest to that instant (carryon_common.core.stamped): images come late, and the
latest tool pose would put what the wrist camera sees where the arm has moved since.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.event_handler import QoSSubscriptionMatchedInfo, SubscriptionEventCallbacks
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64, String
from trajectory_msgs.msg import JointTrajectory

from carryon_arm import convert
from carryon_arm.core.cameras import CameraSource, depth_in_metres, load_camera_map
from carryon_arm.core.config import ArmAdapterConfig
from carryon_arm.core.executor import ChunkExecutor, Command, RobotState, StateVerdict
from carryon_arm.core.joint_states import StateStatus
from carryon_common import convert as common_convert
from carryon_common.core import names
from carryon_common.core.chunk import InvalidChunk
from carryon_common.core.config import under_config_dir
from carryon_common.core.driver import Rejection
from carryon_common.core.stamped import StampedQueue
from carryon_common.core.status import implemented
from carryon_common.driver_link import DriverLink
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import TopicKind, qos_for, qos_of
from carryon_interfaces.msg import ActionChunk, SegmentationLabels
from carryon_robot.core.kinematics import load_robot

CAPABILITIES = (
    implemented("arm.joint_trajectory", "released steps → JointTrajectory via Pinocchio IK from the URDF"),
    implemented("arm.pose_target", "released steps → PoseStamped tool targets in the controller's base frame"),
    implemented(
        "arm.safety",
        "watchdog, its own latched e-stop (driver/estop/set), the shield's heartbeat, stale joint states, extra "
        "joint-state publishers and refused steps hold the arm at its last command; with a command key only chunks "
        "the shield signed execute",
    ),
    implemented(
        "arm.state",
        "joint_states, ee_pose (forward kinematics), gripper/width from your driver; joint states that jump "
        "beyond the arm's speed are refused",
    ),
    implemented("arm.cameras", "camera topics and frames bridged from a YAML file (depth to 32FC1 metres)"),
)
_GRIPPER_DEADBAND_M = 0.0005  # a new width is sent only when it changes by more
_TOOL_POSES = 500  # measured tool poses kept to place a tool camera at its image's instant (seconds at 100 Hz)
# A forger or a second driver sends refused joint states at its own rate: one report a second.
_STATE_REPORT_PERIOD_S = 1.0
_STATE_DEGRADED_S = 5.0  # the node is DEGRADED this long after its last refused joint state


class ArmAdapterNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.ARM_ADAPTER_NODE, ArmAdapterConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: ArmAdapterConfig = self.config
        self.set_backends({"interface": cfg.interface})
        self.robot = load_robot(cfg.robot_file)
        self.kinematics = self.robot.kinematics()
        self.executor_ = ChunkExecutor(self.kinematics, cfg, open_width_m=self.robot.gripper_open_width_m)
        self.lock = threading.Lock()
        self._warned_joints = False
        self._width = float("nan")  # measured finger width, metres
        self._last_joint_msg: JointState | None = None
        self._state_publishers = 0  # publishers matched on the joint-states topic
        self._last_refusal: tuple[float, StateVerdict] | None = None  # (monotonic s, verdict)
        self._last_refusal_report = -float("inf")
        self._gripper_sent: float | None = None
        if cfg.interface == "joint_trajectory":
            self.command_pub = self.create_publisher(JointTrajectory, cfg.command_topic, qos_of(TopicKind.COMMAND))
        else:
            self.command_pub = self.create_publisher(PoseStamped, cfg.command_topic, qos_of(TopicKind.COMMAND))
        self.gripper_pub = (
            self.create_publisher(Float64, cfg.gripper_command_topic, qos_of(TopicKind.COMMAND))
            if cfg.gripper_command_topic
            else None
        )
        self.joint_pub = self.create_publisher(JointState, names.JOINT_STATES, qos_for(names.JOINT_STATES))
        self.pose_pub = self.create_publisher(PoseStamped, names.EE_POSE, qos_for(names.EE_POSE))
        self.width_pub = self.create_publisher(Float64, names.GRIPPER_WIDTH, qos_for(names.GRIPPER_WIDTH))
        self.reject_pub = self.create_publisher(String, names.DRIVER_REJECTIONS, qos_for(names.DRIVER_REJECTIONS))
        control = MutuallyExclusiveCallbackGroup()
        self.create_subscription(
            ActionChunk, names.SHIELD_CHUNK, self._on_chunk, qos_for(names.SHIELD_CHUNK), callback_group=control
        )
        self.link = DriverLink(self, cfg, self.now_s, self._reject, on_engage=self._hold_now)
        self.executor_.blocked, self.executor_.paused = self._blocked, self.link.paused
        self.create_subscription(
            # The controller's own topic: best effort connects to any publisher.
            JointState,
            cfg.joint_states_topic,
            self._on_joint_state,
            qos_of(TopicKind.SENSOR),
            callback_group=control,
            event_callbacks=SubscriptionEventCallbacks(matched=self._on_state_publishers),
        )
        self.add_readiness_check(self._joint_state_problems)
        self._tool_poses: StampedQueue[tuple[np.ndarray, np.ndarray]] = StampedQueue(_TOOL_POSES)
        self._tool_mounted = False  # a bridged camera rides on the tool (set by _bridge_camera)
        self.create_timer(1.0 / cfg.control_rate_hz, self._on_tick, callback_group=control)
        if cfg.guard_rate_hz > cfg.control_rate_hz:  # a silent shield or stale joints stop the arm between steps
            self.create_timer(1.0 / cfg.guard_rate_hz, self._on_guard, callback_group=control)
        self._bridge_cameras(cfg.cameras_file)
        self.set_ready()

    # -- arm ------------------------------------------------------------------------------

    def _on_joint_state(self, msg: JointState) -> None:
        """Arm and fingers may come in one message or in separate ones (arm and gripper drivers)."""
        fingers = common_convert.joint_positions(msg, self.robot.gripper_joints) if self.robot.gripper_joints else None
        q = common_convert.joint_positions(msg, self.robot.joint_names)
        if q is None:
            if fingers is not None:
                self._width = float(fingers.sum())
            elif not self._warned_joints:
                topic = self.config.joint_states_topic
                self._reject(f"joint states on {topic} lack the arm joints {self.robot.joint_names}; ignored")
                self._warned_joints = True
            return
        now = self.now_s()
        stamp = common_convert.time_from_msg(msg.header.stamp) or None  # 0: the driver does not stamp
        width = float(fingers.sum()) if fingers is not None else self._width
        with self.lock:
            verdict = self.executor_.update_state(
                RobotState(q, width, now, stamp), may_reanchor=self._too_many_publishers() is None
            )
            if verdict.used:
                self._last_joint_msg = msg  # relayed with the state it gave
        if not verdict.used:
            if verdict.status == StateStatus.REFUSED:
                self._refused_state(verdict)
            return
        if verdict.status == StateStatus.ANCHORED and self._last_refusal is not None:
            self._tell(f"joint states on {self.config.joint_states_topic}: {verdict.reason}")
        self._width = width  # the fingers of a refused message are not believed either
        if self._tool_mounted:  # forward kinematics per measurement only when a camera rides on the tool
            tool = self.kinematics.forward(q)
            with self.lock:
                self._tool_poses.add(stamp or now, tool)  # unstamped: the receipt time stands in

    def _refused_state(self, verdict: StateVerdict) -> None:
        """Count it for the status; report it at most once a second (a forger sends at its own rate)."""
        now = time.monotonic()
        self._last_refusal = (now, verdict)
        if now - self._last_refusal_report >= _STATE_REPORT_PERIOD_S:
            self._last_refusal_report = now
            self._tell(
                f"joint state on {self.config.joint_states_topic} refused, not used: {verdict.reason} "
                f"({self.executor_.gate.refused} refused since start)"
            )

    def _on_state_publishers(self, info: QoSSubscriptionMatchedInfo) -> None:
        was = self._too_many_publishers()
        self._state_publishers = info.current_count
        reason = self._too_many_publishers()
        if reason is not None:
            self._tell(reason)
        elif was is not None:
            self.get_logger().info(f"{info.current_count} publisher(s) on {self.config.joint_states_topic} again")

    def _too_many_publishers(self) -> str | None:
        cfg: ArmAdapterConfig = self.config
        count = self._state_publishers
        if count <= cfg.max_joint_state_publishers:
            return None
        return (
            f"{count} publishers on {cfg.joint_states_topic} (limit {cfg.max_joint_state_publishers}, "
            "max_joint_state_publishers): which one is the arm is unknown; chunks refused, the arm holds"
        )

    def _blocked(self, now_s: float) -> str | None:
        """Why no step may run now: the e-stop and heartbeat (DriverLink), or extra joint-state publishers."""
        reason = self.link.blocked(now_s)
        return reason if reason is not None else self._too_many_publishers()

    def _joint_state_problems(self) -> str | None:
        """The status: extra publishers on the joint-states topic, joint states refused lately."""
        problems = [self._too_many_publishers()]
        last = self._last_refusal
        if last is not None and time.monotonic() - last[0] < _STATE_DEGRADED_S:
            problems.append(f"{self.executor_.gate.refused} joint states refused since start (last: {last[1].reason})")
        return "; ".join(p for p in problems if p) or None

    def _on_chunk(self, msg: ActionChunk) -> None:
        try:
            chunk = common_convert.chunk_from_msg(msg)
            refused = self.link.admit(msg)
            if refused is not None:
                raise InvalidChunk(refused)
            with self.lock:
                self.executor_.submit(chunk, self.now_s())
        except InvalidChunk as exc:
            with self.lock:
                command = self.executor_.hold(self.now_s())
            self._send(command)
            self._reject(f"chunk {msg.chunk_id}: {exc}")

    def _hold_now(self) -> None:
        """The e-stop engaged: hold where the arm is, now (not at the next control period)."""
        with self.lock:
            command = self.executor_.hold(self.now_s())
        self._send(command)

    def _on_tick(self) -> None:
        with self.lock:
            rejected = len(self.executor_.rejections)
            command = self.executor_.tick(self.now_s())
            new = self.executor_.rejections[rejected:]
            now = self.now_s()
            fresh = self.executor_.stale_reason(now) is None  # a stale state is not re-stamped as new
            state, joint_msg = self.executor_.state, self._last_joint_msg
        self._send(command)
        self._report(new)
        if fresh and state is not None and joint_msg is not None:
            self._publish_state(state, joint_msg)

    def _on_guard(self) -> None:
        with self.lock:
            rejected = len(self.executor_.rejections)
            command = self.executor_.guard(self.now_s())
            new = self.executor_.rejections[rejected:]
        self._send(command)
        self._report(new)

    def _report(self, rejections: list[Rejection]) -> None:
        for rejection in rejections:
            where = f"chunk {rejection.chunk_id} step {rejection.step}: " if rejection.chunk_id >= 0 else ""
            self._reject(where + rejection.reason)

    def _send(self, command: Command | None) -> None:
        if command is None:
            return
        cfg: ArmAdapterConfig = self.config
        if cfg.interface == "joint_trajectory":
            self.command_pub.publish(convert.trajectory_msg(self.robot.joint_names, command))
        else:
            position, rotation = self.kinematics.to_base(command.position, command.rotation)
            self.command_pub.publish(
                common_convert.pose_msg(position, rotation, self.stamp_now(), cfg.command_frame_id)
            )
        width = command.gripper_width_m
        if self.gripper_pub is None or width is None:
            return
        if self._gripper_sent is None or abs(width - self._gripper_sent) > _GRIPPER_DEADBAND_M:
            self.gripper_pub.publish(Float64(data=float(width)))
            self._gripper_sent = width

    def _publish_state(self, state: RobotState, joint_msg: JointState) -> None:
        measured = joint_msg.header.stamp
        stamp = measured if measured.sec or measured.nanosec else self.stamp_now()
        position, rotation = self.kinematics.forward(state.q)
        relay = JointState(name=list(joint_msg.name), position=list(joint_msg.position))
        relay.velocity, relay.effort = list(joint_msg.velocity), list(joint_msg.effort)
        relay.header.stamp = stamp
        self.joint_pub.publish(relay)
        self.pose_pub.publish(common_convert.pose_msg(position, rotation, stamp))
        if np.isfinite(state.gripper_width_m):
            self.width_pub.publish(Float64(data=state.gripper_width_m))

    def _reject(self, reason: str) -> None:
        self.get_logger().warning(f"command refused, arm holds: {reason}")
        self.reject_pub.publish(String(data=reason))

    def _tell(self, line: str) -> None:
        """What is not a refused command but belongs on driver/rejections: refused joint states."""
        self.get_logger().warning(line)
        self.reject_pub.publish(String(data=line))

    # -- cameras --------------------------------------------------------------------------
    def _bridge_cameras(self, cameras_file: str) -> None:
        if not cameras_file:
            return
        path = under_config_dir(cameras_file)
        cameras = load_camera_map(path).cameras
        group = MutuallyExclusiveCallbackGroup()  # one at a time (the node spins one thread: main)
        for name, source in cameras.items():
            self._bridge_camera(name, source, group)
        self.get_logger().info(f"bridging cameras {sorted(cameras)} from {path}")

    def _bridge_camera(self, name: str, source: CameraSource, group: MutuallyExclusiveCallbackGroup) -> None:
        self._tool_mounted = self._tool_mounted or source.mount == "tool"
        topic = functools.partial(names.camera_topic, name)
        # Everything from the camera driver best effort: that connects to any publisher.
        sensor = qos_of(TopicKind.SENSOR)
        color_pub = self.create_publisher(Image, topic("color"), qos_for(topic("color")))
        depth_pub = self.create_publisher(Image, topic("depth"), qos_for(topic("depth")))
        info_pub = self.create_publisher(CameraInfo, topic("camera_info"), qos_for(topic("camera_info")))
        pose_pub = self.create_publisher(PoseStamped, topic("pose"), qos_for(topic("pose")))

        def reframe(msg: Any) -> Any:
            if source.frame_id:
                msg.header.frame_id = source.frame_id
            return msg

        posed: list[tuple[int, int]] = []  # the last stamp a pose was published for

        def publish_pose(stamp: Any) -> None:
            """The camera's pose at an image's stamp (once per stamp): consumers pair depth,
            colour and masks with the pose of their own instant, and a driver may stamp its
            aligned depth apart from its colour."""
            key = (stamp.sec, stamp.nanosec)
            if posed and posed[-1] == key:
                return
            with self.lock:
                nearest = self._tool_poses.nearest(common_convert.time_from_msg(stamp))
            pose = source.optical_pose(*(nearest[1] if nearest is not None else (None, None)))
            if pose is not None:
                pose_pub.publish(common_convert.pose_msg(pose[:3, 3], pose[:3, :3], stamp))
                posed[:] = [key]

        def on_color(msg: Image) -> None:
            msg = convert.rgb_msg(msg)
            color_pub.publish(reframe(msg))
            publish_pose(msg.header.stamp)

        def on_depth(msg: Image) -> None:
            try:
                metres = depth_in_metres(common_convert.image_array(msg), source.depth_scale)
            except ValueError as exc:
                self.get_logger().warning(f"camera {name}: depth dropped: {exc}", throttle_duration_sec=5.0)
                return
            depth_pub.publish(reframe(convert.depth_msg(msg.header, metres)))
            publish_pose(msg.header.stamp)

        self.create_subscription(Image, source.color, on_color, sensor, callback_group=group)
        self.create_subscription(Image, source.depth, on_depth, sensor, callback_group=group)
        self.create_subscription(
            CameraInfo,
            source.camera_info,
            lambda msg: info_pub.publish(reframe(msg)),
            sensor,
            callback_group=group,
        )
        if source.segmentation:
            seg_pub = self.create_publisher(Image, topic("segmentation"), qos_for(topic("segmentation")))
            self.create_subscription(
                Image, source.segmentation, lambda msg: seg_pub.publish(reframe(msg)), sensor, callback_group=group
            )
        if source.labels:
            labels_pub = self.create_publisher(SegmentationLabels, topic("labels"), qos_for(topic("labels")))
            self.create_subscription(
                SegmentationLabels, source.labels, labels_pub.publish, sensor, callback_group=group
            )


def main() -> int:
    # One thread: every callback here is short (an IK solve, a message relayed, a depth image
    # rescaled), so an e-stop state waits at most for one of them; with rclpy's multi-threaded
    # executor the node spent a core on spinning at the controller's 100 Hz and took e-stop
    # states and chunks up to 3 s late on a loaded machine (run_node).
    return run_node(ArmAdapterNode, threads=1)


if __name__ == "__main__":
    raise SystemExit(main())
