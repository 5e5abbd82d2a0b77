"""perception_node: perceives the scene from the cameras, in both profiles.

Inputs, per camera in `cameras`: camera/<name>/color, depth, camera_info and pose (the
optical frame in `world`), plus joint_states and gripper/width (the self-filter poses the
robot's model with them). At most `rate_hz` times a second, when a new depth image has
arrived, it perceives one instant per camera: the newest depth image with a colour image
and a pose of its stamp (CameraStreams.near_instant), and the joint states nearest to it
(carryon_common.core.stamped: the latest of each stream would mix instants while the arm moves). It publishes:

* camera/<name>/segmentation (32SC1 instance ids) + camera/<name>/labels, stamped like
  that camera's depth image: what the shield, the judge and recovery read. Ids are stable
  for the run (`robot` 1, `table` 2, objects from 10);
* perception/scene (PerceivedScene): the fused objects (label, track id, points, support,
  region) and the support planes.

Bad input never becomes a silent empty result: a camera whose images are missing,
malformed, older than `max_image_age_s`, or without a colour image, pose or joint states of
its instant is left out and named in the diagnostics (on
perception/scene, in the log and in `carryon status`, state degraded); with no joint states
nothing is published (the robot could not be told from obstacles), so consumers see stale
masks and fail closed.

Reference images from user memory (core/references.py): the node asks memory_node for them
(memory/get_reference_images) at start-up, retrying every few seconds until it answers, and
again after each memory/changed that concerns an image; the labeller built with them takes
over at the next perception step. Requests never block: they are sent and polled on their
own callback group, and perception runs with the catalog it has meanwhile. The entities
that gained images are listed in the status; an image left out (corrupt, missing, a reserved
name) is named in the log and the status (degraded) until memory changes.
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64

from carryon_common import convert as common_convert
from carryon_common.camera_streams import CameraStreams
from carryon_common.core import names
from carryon_common.core.clouds import CameraView, ObservationUnusable
from carryon_common.core.stamped import StampedQueue
from carryon_common.core.status import NodeState, ServiceStatus, implemented
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import qos_for
from carryon_common.request_auth import sign_request
from carryon_interfaces.msg import MemoryChange, PerceivedScene, PlanState, SegmentationLabels
from carryon_interfaces.srv import GetReferenceImages
from carryon_perception import convert
from carryon_perception.core import references
from carryon_perception.core.build import CatalogLabeller, build_perception
from carryon_perception.core.config import PerceptionConfig
from carryon_perception.core.open_vocab import OpenVocabRecogniser, task_prompts
from carryon_perception.core.tabletop import TabletopPerception

CAPABILITIES = (
    implemented("perception.segmentation", "labelled instance segmentation per camera, ids stable across frames"),
    implemented("perception.objects", "fused objects with support and region, support planes (perception/scene)"),
    implemented("perception.self_filter", "the robot removed from its model posed by the joint states"),
    implemented("perception.reference_images", "user-memory photos of entities added to the object catalog"),
)
_INPUTS = {"color": Image, "depth": Image, "camera_info": CameraInfo, "pose": PoseStamped}
_JOINT_QUEUE = 500  # joint states kept to find the one of a depth image's instant (seconds at a driver's rate)
_REFERENCES_POLL_S = 0.2  # how often the reference-image request is sent / its answer looked at, s
_REFERENCES_RETRY_S = 2.0  # wait before asking memory again after no answer or an error, s
_REFERENCES_TIMEOUT_S = 10.0  # an answer this late is given up (and asked for again), s
_MAX_SHOWN = 3  # reference problems named in the status (all are logged)


class PerceptionNode(CarryOnNode):
    def __init__(self, perception: TabletopPerception | None = None, **node_kwargs: Any) -> None:
        super().__init__(names.PERCEPTION_NODE, PerceptionConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: PerceptionConfig = self.config
        self.perception = perception if perception is not None else build_perception(cfg)
        self.set_backends({"perception": self.perception.name})
        self.lock = threading.Lock()
        self.streams = CameraStreams(history=cfg.sync_queue)
        self._joints: StampedQueue[JointState] = StampedQueue(_JOINT_QUEUE)
        self._width: Float64 | None = None
        self._last_depth: dict[str, Any] = {}
        self._seg_pubs: dict[str, tuple[Any, Any]] = {}
        for camera in cfg.cameras:
            for stream, kind in _INPUTS.items():
                topic = names.camera_topic(camera, stream)
                self.create_subscription(kind, topic, self.streams.keeper(camera, stream), qos_for(topic))
            segmentation, labels = names.camera_topic(camera, "segmentation"), names.camera_topic(camera, "labels")
            self._seg_pubs[camera] = (
                self.create_publisher(Image, segmentation, qos_for(segmentation)),
                self.create_publisher(SegmentationLabels, labels, qos_for(labels)),
            )
        self.create_subscription(JointState, names.JOINT_STATES, self._on_joints, qos_for(names.JOINT_STATES))
        self.create_subscription(
            Float64, names.GRIPPER_WIDTH, lambda m: setattr(self, "_width", m), qos_for(names.GRIPPER_WIDTH)
        )
        self.scene_pub = self.create_publisher(PerceivedScene, names.PERCEPTION_SCENE, qos_for(names.PERCEPTION_SCENE))
        self.create_timer(1.0 / cfg.rate_hz, self._on_tick, callback_group=MutuallyExclusiveCallbackGroup())
        self.frames = 0
        self._prompt_note = ""
        if isinstance(self.perception.recogniser, OpenVocabRecogniser):
            self._prompt_note = f"open_vocab prompts: {', '.join(self.perception.recogniser.prompts) or 'none'}"
            self.create_subscription(
                PlanState, names.PLAN_STATE, self._on_plan_state, qos_for(names.PLAN_STATE, depth=10)
            )
        self._init_references()
        self._report([])

    # -- reference images from user memory ------------------------------------------------
    def _init_references(self) -> None:
        labeller = self.perception.labeller
        self._base_labeller = labeller if isinstance(labeller, CatalogLabeller) else None
        self._pending_labeller: CatalogLabeller | None = None  # taken over at the next perception step
        self._status_lock = threading.RLock()  # the perception step and the reference answers both report
        self.references: references.References | None = None  # the last set applied
        self._reference_problems: list[str] = []
        self._reference_note = "reference images from memory: waiting for memory_node"
        if self._base_labeller is None:
            self._reference_note = f"reference images from memory: not used (backend {self.perception.name})"
            return
        group = MutuallyExclusiveCallbackGroup()
        self._memory = self.create_client(GetReferenceImages, names.MEMORY_GET_REFERENCE_IMAGES, callback_group=group)
        self._request: tuple[Any, float] | None = None  # (future, monotonic time sent)
        self._refresh_wanted = True
        self._next_try = 0.0
        self._changes = self.create_subscription(
            MemoryChange,
            names.MEMORY_CHANGED,
            self._on_memory_change,
            qos_for(names.MEMORY_CHANGED),
            callback_group=group,
        )
        self._change_publishers = 0
        self.create_timer(_REFERENCES_POLL_S, self._on_references_tick, callback_group=group)

    def _on_memory_change(self, msg: MemoryChange) -> None:
        if references.concerns_reference_images(msg.file, msg.key, msg.previous_value, msg.new_value):
            self._refresh_wanted = True
            self._next_try = 0.0

    def _on_references_tick(self) -> None:
        now = time.monotonic()
        publishers = self._changes.get_publisher_count()
        if publishers > self._change_publishers:
            # memory/changed newly matched (memory_node started or restarted): a change made
            # before the match was never heard, so ask again
            self._refresh_wanted = True
        self._change_publishers = publishers
        if self._request is not None:
            future, sent = self._request
            if future.done():
                self._request = None
                self._on_references_answer(future)
            elif now - sent > _REFERENCES_TIMEOUT_S:
                self._memory.remove_pending_request(future)
                self._request = None
                self._retry(f"{names.MEMORY_GET_REFERENCE_IMAGES} did not answer within {_REFERENCES_TIMEOUT_S} s")
            return
        if not self._refresh_wanted or now < self._next_try:
            return
        if not self._memory.service_is_ready():
            self._next_try = now + _REFERENCES_RETRY_S
            return
        self._refresh_wanted = False
        request = sign_request(self.identity, GetReferenceImages.Request(user_id=""))  # memory reads are signed
        self._request = (self._memory.call_async(request), now)

    def _retry(self, why: str) -> None:
        """Ask memory again after a pause; the catalog in use stays meanwhile."""
        self._refresh_wanted = True
        self._next_try = time.monotonic() + _REFERENCES_RETRY_S
        self.get_logger().warning(f"reference images: {why}; asking again in {_REFERENCES_RETRY_S} s")
        with self._status_lock:
            self._reference_note = f"reference images from memory: {why}; retrying"
            self._refresh_status()

    def _on_references_answer(self, future: Any) -> None:
        if future.exception() is not None:
            self._retry(f"{names.MEMORY_GET_REFERENCE_IMAGES} failed: {future.exception()}")
            return
        response = future.result()
        if response.status != int(ServiceStatus.OK):
            status = next((s.name for s in ServiceStatus if s == response.status), str(response.status))
            self._retry(f"memory_node answered {status}: {response.message}")
            return
        assert self._base_labeller is not None
        try:
            found = references.add_references(
                self._base_labeller.catalog, [convert.reference_image_from_msg(m) for m in response.images]
            )
            labeller = references.labeller_with_references(self._base_labeller, found)
        except Exception as exc:  # noqa: BLE001 - a bug here must not stop perception: keep the catalog in use
            self.get_logger().error(f"reference images not applied: {exc}\n{traceback.format_exc()}")
            with self._status_lock:
                self._reference_problems = [f"not applied ({type(exc).__name__}: {exc}); the catalog in use stays"]
                self._refresh_status()
            return
        with self.lock:
            self._pending_labeller = labeller
        left_out = [*response.left_out, *found.problems]
        for problem in left_out:
            self.get_logger().warning(f"reference image left out: {problem}")
        with self._status_lock:
            self._reference_problems = left_out
            self._reference_note = f"{found.summary()} (memory version {response.version})"
            self._refresh_status()
        self.get_logger().info(self._reference_note)
        self.references = found

    # -- what the open_vocab detector asks for ------------------------------------------
    def _on_plan_state(self, msg: PlanState) -> None:
        """While a plan executes, the detector asks for the objects its subtasks name (the
        active subtask's first) before the configured ones; the configured ones alone
        otherwise."""
        recogniser = self.perception.recogniser
        assert isinstance(recogniser, OpenVocabRecogniser)
        named: list[str] = []
        if msg.state == PlanState.STATE_EXECUTING:
            for state in sorted(msg.subtasks, key=lambda s: s.subtask.id != msg.active_subtask_id):
                named += [state.subtask.target, state.subtask.destination, state.subtask.source]
        prompts, left_out = task_prompts(recogniser.base_prompts, named, self.perception.locations)
        if prompts == recogniser.prompts:
            return
        recogniser.prompts = prompts
        places = f" (not objects: {', '.join(left_out)})" if left_out else ""
        with self._status_lock:
            self._prompt_note = f"open_vocab prompts: {', '.join(prompts) or 'none'}"
            self._refresh_status()
        self.get_logger().info(f"plan {msg.plan_id or '-'}: {self._prompt_note}{places}")

    def _take_pending_labeller(self) -> None:
        with self.lock:
            labeller, self._pending_labeller = self._pending_labeller, None
        if labeller is not None:
            self.perception.labeller = labeller

    def _on_joints(self, msg: JointState) -> None:
        with self.lock:
            self._joints.add(common_convert.time_from_msg(msg.header.stamp), msg)

    # -- one perception step -------------------------------------------------------------
    def views(self, now_s: float) -> tuple[list[CameraView], dict[str, Any], dict[str, JointState], list[str]]:
        """The cameras usable now (fresh, well-formed, one instant each), their depth
        messages, the joint states of each one's instant, and why the others are not."""
        cfg: PerceptionConfig = self.config
        with self.lock:
            joints = self._joints.copy()
        views, depths, posed, problems = [], {}, {}, []
        for camera in cfg.cameras:
            missing = self.streams.missing(camera, _INPUTS)
            if missing:
                problems.append(f"camera {camera}: no {', '.join(missing)} received")
                continue
            newest_joints = joints.items()[-1][0] + cfg.max_joint_offset_s if len(joints) else None
            msgs = self.streams.near_instant(camera, "depth", _INPUTS, cfg.sync_tolerance_s, until_s=newest_joints)
            if isinstance(msgs, str):
                problems.append(f"camera {camera}: {msgs}")
                continue
            stamp_s = common_convert.time_from_msg(msgs["depth"].header.stamp)
            if now_s - stamp_s > cfg.max_image_age_s:
                problems.append(f"camera {camera}: depth older than {cfg.max_image_age_s} s")
                continue
            nearest = joints.nearest(stamp_s)
            if nearest is None or abs(nearest[0] - stamp_s) > cfg.max_joint_offset_s:
                offset = "none received" if nearest is None else f"nearest {abs(nearest[0] - stamp_s):.3f} s away"
                problems.append(
                    f"camera {camera}: no joint_states of its instant ({offset}; the robot cannot be posed)"
                )
                continue
            try:
                view = common_convert.camera_view(camera, msgs)
            except ValueError as exc:
                problems.append(f"camera {camera}: {exc}")
                continue
            views.append(view)
            depths[camera] = msgs["depth"]
            posed[camera] = nearest[1]
        return views, depths, posed, problems

    def _on_tick(self) -> None:
        self._take_pending_labeller()  # between frames: every camera of a frame is labelled alike
        now = self.now_s()
        views, depths, posed, problems = self.views(now)
        fresh = [v for v in views if depths[v.camera] is not self._last_depth.get(v.camera)]
        if views and not fresh:
            return  # nothing new since the last step
        if not views and not len(self._joints):
            problems.append("no joint_states received: the robot cannot be told from obstacles; nothing published")
            self._report(problems)
            return
        width_msg = self._width
        by_camera = {camera: convert.joints_from_msg(msg) for camera, msg in posed.items()}
        try:
            result = self.perception.perceive(
                views,
                next(iter(by_camera.values()), {}),
                None if width_msg is None else float(width_msg.data),
                now,
                joints_by_camera=by_camera,
            )
        except ObservationUnusable as exc:
            self._report([*problems, str(exc)])
            return
        for view in views:
            self._last_depth[view.camera] = depths[view.camera]
        for camera, segmentation in result.segmentations.items():
            depth = depths[camera]
            image, labels = convert.segmentation_msgs(segmentation, depth.header.frame_id, depth.header.stamp)
            seg_pub, labels_pub = self._seg_pubs[camera]
            seg_pub.publish(image)
            labels_pub.publish(labels)
        stamp = max((depths[v.camera].header.stamp for v in views), key=common_convert.time_from_msg)
        diagnostics = [*problems, *result.diagnostics]
        self.scene_pub.publish(convert.scene_msg(result.objects, result.planes, diagnostics, stamp, result.out_of_view))
        self.frames += 1
        self._report(diagnostics)

    def _refresh_status(self) -> None:
        """The status again with the last frame's problems (the reference images changed)."""
        self._report(self._frame_problems)

    def _report(self, problems: list[str]) -> None:
        """Degraded naming the frame's problems and any reference image left out, else ready;
        either way the message ends with which entities have reference images."""
        with self._status_lock:
            self._frame_problems = problems
            left_out = self._reference_problems
            if left_out:
                more = f" (+{len(left_out) - _MAX_SHOWN} more, see the log)" if len(left_out) > _MAX_SHOWN else ""
                problems = [*problems, f"reference images left out: {'; '.join(left_out[:_MAX_SHOWN])}{more}"]
            notes = [note for note in (self._reference_note, self._prompt_note) if note]
            if problems:
                self.set_state(NodeState.DEGRADED, "; ".join([*problems, *notes]))
            else:
                self.set_state(NodeState.READY, "; ".join(["ready", *notes]))


def main() -> int:
    return run_node(PerceptionNode)
