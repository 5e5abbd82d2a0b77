"""shield_node: the gate every motion command passes on its way to the robot driver.

Policy and recovery chunks come in; what is predicted to stay clear of obstacles goes
out on shield/chunk (a prefix, or a short retreat when the first step is blocked). Every
chunk is answered with a ShieldEvent, and with markers of the predicted tool path
(released vs blocked), the retreat and the nearest obstacle point; the obstacle cloud is
published as PointCloud2. Sensors are cached with their stamps; anything missing, stale
or in an unknown frame, and any exception inside the shield, releases nothing.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from dataclasses import replace
from typing import Any

import numpy as np
from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from sensor_msgs.msg import CameraInfo, Image, JointState, PointCloud2
from std_msgs.msg import Float64
from visualization_msgs.msg import MarkerArray

from carryon_common import convert as common_convert
from carryon_common.camera_streams import CameraStreams, stamp_key
from carryon_common.core import names
from carryon_common.core.chunk import InvalidChunk
from carryon_common.core.status import implemented
from carryon_common.input_sources import SingleSourceInputs
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import qos_for
from carryon_common.request_auth import OPERATOR_OR_PLANNER, authorize, sign_decision
from carryon_interfaces.msg import ActionChunk, SegmentationLabels, ShieldEvent
from carryon_interfaces.srv import SetTask
from carryon_shield import convert
from carryon_shield.core.build import build_shield
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.filter import Snapshot
from carryon_shield.core.gate import Decision
from carryon_shield.core.grounders import GROUNDERS
from carryon_shield.core.grounding import Grounder
from carryon_shield.core.kernel import warm_up
from carryon_shield.core.perception import CommandTracker
from carryon_shield.core.response import commanded_poses, load_response_model
from carryon_shield.core.types import PerceptionUnavailable, RgbdFrame, RobotState, TaskSpec
from carryon_shield.estop import ShieldEstop

CAPABILITIES = (
    implemented(
        "shield.estop",
        "latched emergency stop kept across restarts (a restarted shield comes back engaged): estop/set, "
        "estop/state; a signed heartbeat on shield/heartbeat",
    ),
    implemented("shield.signed", "released chunks and e-stop states signed with the key shared with the driver"),
    implemented(
        "shield.fail_closed",
        "every chunk answered with a ShieldEvent; invalid, stale, unperceived chunks and shield errors release nothing",
    ),
    implemented("shield.filter", "response-model prediction, per-part distance checks, prefix release or retreat"),
    implemented(
        "shield.grounding",
        "obstacle sets from RGB-D + perception_node's masks (masks; text_prompted, a local model; sim_truth oracle)",
    ),
    implemented("shield.set_task", "target, source-support patch, destination and permitted contacts exempt"),
    implemented("shield.markers", "rviz markers of released / blocked / retreat paths, nearest points; obstacle cloud"),
)


# Who may set the shield's task (its exemptions): the planner's executive, recovery, and an
# operator testing a skill alone (`carryon policy run --target`, logged with their name).
TASK_SETTERS = (*OPERATOR_OR_PLANNER, f"node:{names.RECOVERY_NODE}")


class ShieldNode(CarryOnNode):
    def __init__(self, grounder: Grounder | None = None, **node_kwargs: Any) -> None:
        """`grounder` replaces the configured one (it must read the same streams: masks or
        colour, as `config.grounder` says); None builds it from the config."""
        super().__init__(names.SHIELD_NODE, ShieldConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: ShieldConfig = self.config
        response, response_source = load_response_model(cfg.response_model_file)
        grounder_name = cfg.grounder if grounder is None else type(grounder).__name__
        if cfg.grounder == "sim_truth":
            grounder_name = f"sim_truth ({names.ORACLE_LABEL})"
            self.get_logger().warning(
                f"grounder sim_truth: the shield sees through the simulator's own masks ({names.ORACLE_LABEL}, "
                "an ablation for benchmarks, never a robot's perception)"
            )
        self.set_backends({"grounder": grounder_name, "response_model": response_source})
        if response_source.startswith("no "):
            self.get_logger().warning(response_source)
        pipeline = build_shield(cfg, response, perceive=self._perceive, grounder=grounder)
        self.perception, self.shield, self.gate = pipeline.perception, pipeline.shield, pipeline.gate
        self._uses_masks = GROUNDERS.get(cfg.grounder).uses_masks
        began = time.perf_counter()
        warm_up()  # compile (or load) the distance kernel now, not on the first chunk
        if self.shield.arm is not None:
            self.shield.arm.warm_up()  # the arm's kinematics and kernels too
        self.get_logger().info(f"distance kernel ready in {time.perf_counter() - began:.2f} s")
        self.tracker = CommandTracker()
        self.streams = CameraStreams()
        # Every sensor input from one publisher, or it is not used (carryon_common/input_sources.py).
        self.inputs = SingleSourceInputs(self, cfg.max_input_publishers)
        self._assembled: dict[str, tuple[int, int]] = {}
        self._frame_errors: dict[str, str] = {}
        self._width: tuple[float, float] | None = None  # (metres, receive time)
        self._last_pose: tuple[float, np.ndarray] | None = None
        self._published_groundings = 0
        self._logged_errors: set[str] = set()

        self.safe_pub = self.create_publisher(ActionChunk, names.SHIELD_CHUNK, qos_for(names.SHIELD_CHUNK))
        self.event_pub = self.create_publisher(ShieldEvent, names.SHIELD_EVENTS, qos_for(names.SHIELD_EVENTS))
        self.marker_pub = self.create_publisher(MarkerArray, names.SHIELD_MARKERS, qos_for(names.SHIELD_MARKERS))
        self.cloud_pub = self.create_publisher(
            PointCloud2, names.SHIELD_OBSTACLES, qos_for(names.SHIELD_OBSTACLES, depth=1)
        )
        # The latched e-stop, the command key, the signed heartbeat (carryon_shield/estop.py).
        self.estop = ShieldEstop(self, cfg, self.gate)
        # Chunks, robot state and the task in one group of their own: a chunk's decision never
        # waits behind the conversion of camera images (the default group, other executor threads).
        control = MutuallyExclusiveCallbackGroup()
        self.create_service(SetTask, names.SHIELD_SET_TASK, self._on_set_task, callback_group=control)
        for camera in cfg.cameras:
            self._subscribe_camera(camera, with_masks=self._uses_masks)
        self.inputs.subscribe(
            PoseStamped, names.EE_POSE, self._on_ee_pose, qos_for(names.EE_POSE), callback_group=control
        )
        self.inputs.subscribe(
            Float64, names.GRIPPER_WIDTH, self._on_width, qos_for(names.GRIPPER_WIDTH), callback_group=control
        )
        self._joints: tuple[float, np.ndarray | None] | None = None  # (stamp, arm joints or None: names missing)
        if self.shield.arm is not None:  # the whole-arm check places the links from the measured joints
            self.inputs.subscribe(
                JointState, names.JOINT_STATES, self._on_joints, qos_for(names.JOINT_STATES), callback_group=control
            )
        self.add_backend("inputs", self.inputs.describe())
        for topic in (names.POLICY_CHUNK, names.RECOVERY_CHUNK):
            self.create_subscription(ActionChunk, topic, self._on_chunk, qos_for(topic), callback_group=control)
        self.create_timer(0.5, self._publish_cloud_if_fresh)
        # Grounding off the per-chunk path: a worker grounds each new frame as it arrives.
        self._frames_arrived = threading.Event()
        self._stopping = threading.Event()
        self._grounding_worker: threading.Thread | None = None
        if cfg.ground_on_arrival:
            self._grounding_worker = threading.Thread(target=self._ground_frames, name="shield-grounding", daemon=True)
            self._grounding_worker.start()
        self.estop.start()
        self.add_readiness_check(self._readiness)
        self.set_ready()

    # -- sensors -----------------------------------------------------------------------

    def _subscribe_camera(self, camera: str, *, with_masks: bool) -> None:
        def keep(stream: str) -> Any:
            keeper = self.streams.keeper(camera, stream)

            def callback(msg: Any) -> None:
                keeper(msg)
                if stream != "camera_info":
                    self._assemble(camera)

            return callback

        backend = GROUNDERS.get(self.config.grounder)
        topics: dict[str, tuple[Any, str]] = {
            "depth": (Image, names.camera_topic(camera, "depth")),
            "camera_info": (CameraInfo, names.camera_topic(camera, "camera_info")),
            "pose": (PoseStamped, names.camera_topic(camera, "pose")),
        }
        if with_masks:
            topics["segmentation"] = (Image, backend.mask_topic(camera, "segmentation"))
            topics["labels"] = (SegmentationLabels, backend.mask_topic(camera, "labels"))
        else:
            topics["color"] = (Image, names.camera_topic(camera, "color"))
        for stream, (kind, topic) in topics.items():
            self.inputs.subscribe(kind, topic, keep(stream), qos_for(topic))

    def _assemble(self, camera: str) -> None:
        """Combine depth, masks (or color) and camera pose of the same instant (equal
        stamps: a moving wrist camera must not pair an image with another frame's pose or
        masks) with the latest intrinsics. Masks come from perception_node a little after
        their depth image, stamped like it: `CameraStreams` keeps recent messages and gives
        the newest complete instant."""
        streams = ("depth", "pose", "camera_info", *(("segmentation", "labels") if self._uses_masks else ("color",)))
        msgs = self.streams.instant(camera, streams)
        if any(m is None for m in msgs.values()):
            return  # wait for the rest of this instant
        key = stamp_key(msgs["depth"])
        if self._assembled.get(camera) == key:
            return
        self._assembled[camera] = key
        mask = msgs["segmentation"] if self._uses_masks else msgs["color"]
        self._use_frame(camera, msgs["depth"], msgs["camera_info"], msgs["pose"], mask=mask, labels=msgs.get("labels"))

    def _use_frame(
        self, camera: str, depth: Image, info: CameraInfo, pose: PoseStamped, *, mask: Image, labels: Any
    ) -> None:
        stamp = common_convert.time_from_msg(depth.header.stamp)
        if pose.header.frame_id != self.config.world_frame:
            self._frame_errors[camera] = (
                f"camera {camera!r} pose is in unknown frame {pose.header.frame_id!r} "
                f"(expected {self.config.world_frame!r})"
            )
            return
        self._frame_errors.pop(camera, None)
        segmentation = mask if self._uses_masks else None
        color = None if self._uses_masks else mask
        try:
            frame = RgbdFrame(
                camera,
                common_convert.image_array(depth),
                common_convert.intrinsics(info),
                common_convert.pose_matrix(pose),
                stamp,
                rgb=common_convert.image_array(color) if color is not None else None,  # type: ignore[arg-type]
                segmentation=common_convert.image_array(segmentation) if segmentation is not None else None,  # type: ignore[arg-type]
                labels=common_convert.labels_from_msg(labels) if labels is not None else {},
                mask_stamp_s=stamp,
            )
        except ValueError as exc:  # an unsupported encoding, a size or label table that does not match
            self._frame_errors[camera] = f"camera {camera!r}: {exc}"
            return
        self.perception.update_frame(frame)
        self._frames_arrived.set()

    def _ground_frames(self) -> None:
        """The grounding worker: grounds the newest frames whenever new ones arrived, and
        captures the carried object at the grasp. It runs at the node's real-time priority
        (graph.yaml realtime_priority) like the decisions: at ordinary priority it was
        preempted while holding the GIL, and a decision waited for it (release p99 34 ms vs
        21 ms, `carryon bench latency`)."""
        while not self._stopping.is_set():
            if not self._frames_arrived.wait(timeout=0.2):
                continue
            self._frames_arrived.clear()
            try:
                self.perception.refresh(self.now_s())
            except Exception as exc:  # noqa: BLE001 - a grounding error must not kill the worker; decisions fail closed
                kind = type(exc).__name__
                if kind not in self._logged_errors:
                    self._logged_errors.add(kind)
                    trace = "".join(traceback.format_exception(exc))
                    self.get_logger().error(f"grounding worker error (decisions ground themselves):\n{trace}")

    def destroy_node(self) -> None:
        self._stopping.set()
        if self._grounding_worker is not None:
            self._grounding_worker.join(timeout=2.0)
        self.estop.stop()
        super().destroy_node()

    def _on_width(self, msg: Float64) -> None:
        self._width = (common_convert.gripper_width(msg), self.now_s())  # InvalidMessage: refused, counted

    def _on_joints(self, msg: JointState) -> None:
        assert self.shield.arm is not None
        # InvalidMessage (counts, duplicates, non-finite values): refused and counted by the inputs
        joints = common_convert.joint_positions(msg, self.shield.arm.kinematics.joint_names)
        self._joints = (common_convert.time_from_msg(msg.header.stamp), joints)

    def _joints_at(self, stamp: float) -> np.ndarray | None:
        """The measured arm joints of the instant `stamp` (None: none that recent, or without the
        arm's joints: the whole-arm check then releases nothing)."""
        if self._joints is None or self._joints[1] is None:
            return None
        joint_stamp, joints = self._joints
        return joints if abs(joint_stamp - stamp) <= self.config.max_state_age_s else None

    def _on_ee_pose(self, msg: PoseStamped) -> None:
        if msg.header.frame_id != self.config.world_frame or self._width is None:
            return  # an unknown frame never becomes state: the snapshot then reports it stale
        stamp = common_convert.time_from_msg(msg.header.stamp)
        matrix = common_convert.pose_matrix(msg)
        velocity = np.zeros(3)
        if self._last_pose is not None and stamp - self._last_pose[0] > 1e-4:
            velocity = (matrix[:3, 3] - self._last_pose[1]) / (stamp - self._last_pose[0])
        self._last_pose = (stamp, matrix[:3, 3].copy())
        target_position, target_rotation = self.tracker.target(stamp)
        holding = self.perception.latch.holding
        self.perception.update_state(
            RobotState(
                matrix[:3, 3],
                matrix[:3, :3],
                velocity,
                self._width[0],
                self.tracker.gripper_command(stamp),
                stamp,
                target_position,
                target_rotation,
                joints=self._joints_at(stamp) if self.shield.arm is not None else None,
            )
        )
        if self.perception.latch.holding != holding:
            self._frames_arrived.set()  # grasped or released: the worker grounds for it before the next chunk

    def _perceive(self, now_s: float) -> Snapshot:
        sources = self.inputs.problems()
        if sources:
            raise PerceptionUnavailable("; ".join(sources))
        if self._frame_errors:
            raise PerceptionUnavailable("; ".join(sorted(self._frame_errors.values())))
        return self.perception.snapshot(now_s, prefer_ready=self.config.ground_on_arrival)

    def _readiness(self) -> str | None:
        """Degraded while a chunk would fail closed for stale, missing or doubly published inputs."""
        sources = self.inputs.problems()
        if sources:
            return "every chunk fails closed: " + "; ".join(sources)
        if self._frame_errors:
            return "every chunk fails closed: " + "; ".join(sorted(self._frame_errors.values()))
        reason = self.perception.unavailable(self.now_s())
        if reason is None and self.shield.arm is not None and self._joints_at(self.now_s()) is None:
            reason = (
                f"no recent {names.JOINT_STATES} with the arm's joints {list(self.shield.arm.kinematics.joint_names)}"
            )
        return None if reason is None else f"every chunk fails closed: {reason}"

    def _publish_cloud_if_fresh(self) -> None:
        if not self.config.ground_on_arrival:  # else the worker keeps the obstacle set current
            try:
                self.perception.ground(self.now_s())
            except PerceptionUnavailable:
                return
        self._publish_cloud()

    def _publish_cloud(self) -> None:
        obstacles = self.perception.obstacles
        if obstacles is not None and self.perception.groundings != self._published_groundings:
            self._published_groundings = self.perception.groundings
            self.cloud_pub.publish(convert.obstacle_cloud(obstacles, self.stamp_now()))

    # -- services ------------------------------------------------------------------------
    def _on_set_task(self, request: SetTask.Request, response: SetTask.Response) -> SetTask.Response:
        # What the shield lets the hand touch is the planner's, recovery's or an operator's to say,
        # proven by signature: a task from anyone else would switch an obstacle off.
        what = f"task {request.subtask_id!r} (exempting {request.target!r})"
        who, why = authorize(self.requests, request, TASK_SETTERS, what, self.get_logger())
        if who is None:
            response.status, response.message = SetTask.Response.STATUS_UNAUTHORIZED, why
            return response
        task = TaskSpec(
            request.subtask_id, request.target, request.source, request.destination, tuple(request.permitted_contacts)
        )
        self.perception.set_task(task)
        self._frames_arrived.set()  # the worker grounds for the new task now, before its first chunk
        seen = set(self.perception.obstacles.names) if self.perception.obstacles is not None else set()
        unseen = sorted((task.exempt_names() | {task.source}) - {""} - seen)
        response.status = SetTask.Response.STATUS_OK
        response.message = f"exempt: {', '.join(sorted(task.exempt_names())) or 'nothing'}" + (
            f"; source patch beneath the target on {task.source}" if task.source else ""
        )
        if unseen and seen:
            response.message += f"; not seen yet: {', '.join(unseen)}"
        return response

    # -- chunks --------------------------------------------------------------------------
    def _on_chunk(self, msg: ActionChunk) -> None:
        started = time.perf_counter()
        now_s = self.now_s()
        try:
            decision = self.gate.decide(common_convert.chunk_from_msg(msg), now_s)
        except InvalidChunk as exc:
            decision = self.gate.reject(
                msg.chunk_id, msg.subtask_id, len(msg.steps), Decision.REJECTED_INVALID, str(exc)
            )
        if decision.error is not None:
            kind = type(decision.error).__name__
            if kind not in self._logged_errors:  # once per kind, with the traceback
                self._logged_errors.add(kind)
                trace = "".join(traceback.format_exception(decision.error))
                self.get_logger().error(f"shield error, failing closed: {decision.reason}\n{trace}")
        stamp = self.stamp_now()
        if decision.released is not None:
            self._record_release(decision.released, now_s)
            released = common_convert.chunk_to_msg(decision.released, stamp)
            self.safe_pub.publish(self.estop.sign(released, names.SHIELD_CHUNK))
        decision = replace(decision, compute_time_s=time.perf_counter() - started)
        self.event_pub.publish(
            sign_decision(self.identity, convert.decision_to_event(decision, stamp), names.SHIELD_EVENTS)
        )
        markers = convert.decision_markers(decision, stamp)
        markers.markers.append(convert.carried_marker(self._carried_in_world(), decision.frame_id, stamp))
        self.marker_pub.publish(markers)
        self._publish_cloud()

    def _carried_in_world(self) -> np.ndarray:
        """The carried object's spheres (S, 4) placed at the tool's latest pose; none when
        nothing is held."""
        state, carried = self.perception.state, self.perception.latch.carried
        if state is None or not self.perception.latch.holding or not len(carried):
            return np.zeros((0, 4))
        centres = state.position + carried[:, :3] @ state.rotation.T
        return np.column_stack([centres, carried[:, 3]])

    def _record_release(self, released: Any, now_s: float) -> None:
        state = self.perception.state
        base_position, base_rotation = self.tracker.target(now_s)
        if base_position is None or base_rotation is None:
            if state is None:
                return
            base_position, base_rotation = state.position, state.rotation
        positions, rotations = commanded_poses(released, base_position, base_rotation)
        self.tracker.record(released.gripper, positions, rotations, dt=released.dt, now_s=now_s)


# The grounding worker and the image callbacks hold the GIL in slices of this length: a
# chunk's decision waits at most about this long for it (Python's default: 5 ms).
GIL_SWITCH_INTERVAL_S = 0.0005


def main() -> int:
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    # One thread: every callback is short (a decision on a ready obstacle set, a pose, a task);
    # grounding has its own worker. With rclpy's multi-threaded executor the spinning thread
    # competed for the GIL with the decision itself (run_node).
    return run_node(ShieldNode, threads=1)
