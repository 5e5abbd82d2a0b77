"""sim_node: the simulated arm + cameras, the default robot for demo, tests, benchmarks.

Looks to the graph like a real arm: it publishes joint states, the tool pose, the
measured gripper width and RGB-D cameras (plus its labelled instance masks under
sim/camera/<name>/, for evaluation only), and executes only the
shielded command topic, holding the arm when commands stop (watchdog). Physics and
rendering run in one simulation thread (OpenGL contexts belong to the thread that made
them); ROS callbacks only hand commands over under a lock.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from builtin_interfaces.msg import Time as TimeMsg
from geometry_msgs.msg import PoseStamped
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Float64, String

from carryon_common import convert as common_convert
from carryon_common.core import contact_rules as rules
from carryon_common.core import names
from carryon_common.core.chunk import InvalidChunk
from carryon_common.core.contact_rules import VIOLATIONS_FILE, ContactTask, Violation
from carryon_common.core.errors import CarryOnError
from carryon_common.core.status import NodeState, implemented
from carryon_common.driver_link import DriverLink
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import qos_for
from carryon_common.request_auth import OPERATOR_OR_PLANNER, OPERATORS, authorize
from carryon_interfaces.msg import ActionChunk, SegmentationLabels, SimTruth
from carryon_interfaces.srv import SetTask, SimPerturb, SimReset, SimState
from carryon_sim import convert
from carryon_sim.core.cameras import CameraRig
from carryon_sim.core.config import SimConfig
from carryon_sim.core.contacts import ContactMonitor
from carryon_sim.core.driver import Driver
from carryon_sim.core.pacing import Pacer, physics_slices
from carryon_sim.core.predicates import object_truths
from carryon_sim.core.scene import PerturbationSpec, load_scene, scene_path, scenes_dir
from carryon_sim.core.world import SCENE_CAMERA, WRIST_CAMERA, World

CAPABILITIES = (
    implemented("sim.world", "MuJoCo tabletop with Franka Panda from config/scenes/*.yaml"),
    implemented(
        "sim.driver",
        "executes shielded chunks via IK at the control rate; watchdog, its own latched e-stop "
        "(driver/estop/set) and the shield's heartbeat hold; with a command key only chunks the shield signed",
    ),
    implemented(
        "sim.sensors", "scene and wrist RGB-D cameras (truth masks: sim/camera/), joint states, tool pose, width"
    ),
    implemented(
        "sim.truth",
        "sim/truth topic and sim/state: poses, predicates, contact violations (sim/set_task; each one in "
        f"<run folder>/{VIOLATIONS_FILE})",
    ),
    implemented(
        "sim.services",
        "reset; perturb (drop, displace, relocate, cover, uncover, slip, place); ground truth, predicates, violations",
    ),
    implemented(
        "sim.clock",
        "/clock every control step (sim profile nodes use sim time); real_time_factor (an upper bound: on a "
        "stalled machine sim time waits rather than catching up), 0 = max",
    ),
    implemented("sim.schedules", "scripted perturbation schedules in scene files (perturbations: at_s, kind, ...)"),
)
_CAMERAS = {"scene": SCENE_CAMERA, "wrist": WRIST_CAMERA}
_TRUTH_STREAMS = (2, 3)  # segmentation and labels in each camera's publishers (convert.camera_msgs' order)
_PERTURBATION_KINDS = {
    SimPerturb.Request.KIND_DROP: "drop",
    SimPerturb.Request.KIND_DISPLACE: "displace",
    SimPerturb.Request.KIND_RELOCATE: "relocate",
    SimPerturb.Request.KIND_COVER: "cover",
    SimPerturb.Request.KIND_UNCOVER: "uncover",
    SimPerturb.Request.KIND_SLIP: "slip",
    SimPerturb.Request.KIND_PLACE: "place",
}


class SimNode(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.SIM_NODE, SimConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: SimConfig = self.config
        self.set_backends({"world": "mujoco", "scene": cfg.scene})
        self.world = World(load_scene(scene_path(scenes_dir(cfg.scenes_dir), cfg.scene)), seed=cfg.seed)
        self.driver = Driver(self.world, watchdog_s=cfg.watchdog_s)
        self.monitor = ContactMonitor(known=frozenset(o.name for o in self.world.scene.spec.objects))
        # Each violation, once it ended, for `carryon report` (only in a run of `carryon up`).
        run_dir = os.environ.get(names.RUN_DIR_ENV)
        self.violations_file = Path(run_dir) / VIOLATIONS_FILE if run_dir else None
        self.lock = threading.Lock()
        self.joint_pub = self.create_publisher(JointState, names.JOINT_STATES, qos_for(names.JOINT_STATES))
        self.pose_pub = self.create_publisher(PoseStamped, names.EE_POSE, qos_for(names.EE_POSE))
        self.width_pub = self.create_publisher(Float64, names.GRIPPER_WIDTH, qos_for(names.GRIPPER_WIDTH))
        self.reject_pub = self.create_publisher(String, names.DRIVER_REJECTIONS, qos_for(names.DRIVER_REJECTIONS))
        self.clock_pub = self.create_publisher(Clock, "/clock", qos_for("/clock"))
        self.camera_pubs = {
            camera: tuple(
                self.create_publisher(kind, topic, qos_for(topic))
                for kind, topic in (
                    (Image, names.camera_topic(camera, "color")),
                    (Image, names.camera_topic(camera, "depth")),
                    # the simulator's own labelled masks: an evaluation oracle under sim/, never
                    # camera/<name>/segmentation, which is perception_node's (what a robot has)
                    (Image, names.sim_truth_camera_topic(camera, "segmentation")),
                    (SegmentationLabels, names.sim_truth_camera_topic(camera, "labels")),
                    (CameraInfo, names.camera_topic(camera, "camera_info")),
                    (PoseStamped, names.camera_topic(camera, "pose")),
                )
            )
            for camera in _CAMERAS
        }
        self.create_subscription(ActionChunk, names.SHIELD_CHUNK, self._on_chunk, qos_for(names.SHIELD_CHUNK))
        # The driver holds the arm within one control period of an e-stop or a silent shield.
        self.link = DriverLink(self, cfg, lambda: self.world.time, self._reject)
        self.driver.blocked, self.driver.paused = self.link.blocked, self.link.paused
        self.create_service(SimReset, names.SIM_RESET, self._on_reset, callback_group=self.service_group)
        self.create_service(SimPerturb, names.SIM_PERTURB, self._on_perturb, callback_group=self.service_group)
        self.create_service(SimState, names.SIM_STATE, self._on_state, callback_group=self.service_group)
        self.create_service(SetTask, names.SIM_SET_TASK, self._on_set_task, callback_group=self.service_group)
        self.truth_pub = self.create_publisher(SimTruth, names.SIM_TRUTH, qos_for(names.SIM_TRUTH))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="simulation", daemon=True)
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._sim_time = bool(self.get_parameter("use_sim_time").value)
        # A control period's physics in slices: the driver's guard runs between them.
        self.slices = physics_slices(1.0 / cfg.control_rate_hz, self.world.model.opt.timestep, cfg.guard_rate_hz)
        self.pacer = Pacer(
            1.0 / cfg.control_rate_hz / len(self.slices), cfg.real_time_factor, slack_steps=len(self.slices)
        )
        self._slowdown_logged = -float("inf")
        self._thread.start()
        if not self._ready.wait(timeout=30.0) or self._failure is not None:
            raise CarryOnError(f"simulation thread failed to start: {self._failure}")
        self.set_ready()

    # -- simulation thread -----------------------------------------------------------
    def _loop(self) -> None:
        cfg: SimConfig = self.config
        try:
            rig = CameraRig(self.world.model, self.world.object_of_body, cfg.camera_width, cfg.camera_height)
        except Exception as exc:  # noqa: BLE001 - reported by the constructor, which raises
            self._failure = exc
            self._ready.set()
            return
        self._ready.set()
        camera_every = max(1, round(cfg.control_rate_hz / cfg.camera_rate_hz))
        tick = 0
        self.pacer.start(time.monotonic())
        try:
            while not self._stop.is_set():
                for index, seconds in enumerate(self.slices):  # one control period
                    with self.lock:
                        rejected = len(self.driver.rejections)
                        if index == 0:
                            self.driver.tick(self.world.time)
                        else:  # between steps: an e-stop or a silent shield stops the arm now
                            self.driver.guard(self.world.time)
                        self.world.step(seconds)
                        if index == len(self.slices) - 1:
                            self._end_period(rig, tick % camera_every == 0)
                        for rejection in self.driver.rejections[rejected:]:
                            self._reject(f"chunk {rejection.chunk_id} step {rejection.step}: {rejection.reason}")
                    if cfg.real_time_factor > 0:
                        slowdowns = self.pacer.slowdowns
                        self._stop.wait(self.pacer.wait(time.monotonic()))
                        if self.pacer.slowdowns != slowdowns:
                            self._report_slowdown()
                    else:
                        time.sleep(0)  # as fast as possible, but let ROS callbacks take the lock
                tick += 1
        except Exception as exc:  # noqa: BLE001 - the node must report it, not die silently
            if self._stop.is_set() or not self.context.ok():
                return  # shutting down: publishers went away under the loop, nothing failed
            self._failure = exc
            with self.lock:
                self.driver.hold()
            self.get_logger().error(f"simulation stopped: {exc!r}")
            self.set_state(NodeState.ERROR, f"simulation stopped: {exc}")
        finally:
            rig.close()

    def _end_period(self, rig: CameraRig, cameras: bool) -> None:
        """What the end of each control period publishes (call with the lock held)."""
        self.monitor.update(self.world.model, self.world.data, self.world.object_of_body)
        self._record_violations(self.monitor.take_ended())
        self._publish_state()
        if cameras:
            self._publish_cameras(rig)
            self._publish_truth()
        self._publish_clock()

    def _record_violations(self, ended: Iterable[Violation]) -> None:
        """Append ended violations to the run folder's violations file (call with the lock held)."""
        ended = list(ended)
        for violation in ended:
            self.get_logger().warning(f"unpermitted contact: {violation.describe()}")
        if not ended or self.violations_file is None:
            return
        try:
            with self.violations_file.open("a", encoding="utf-8") as out:
                out.writelines(v.to_json() + "\n" for v in ended)
        except OSError as exc:
            self.get_logger().error(f"violations not recorded in {self.violations_file}: {exc}")

    def _log_permitted(self) -> None:
        """What the task's exemptions let through since the last reset (call with the lock held)."""
        steps = self.monitor.permitted_steps
        if steps:
            listed = ", ".join(f"{m} → {t} ({rule}) {n}" for (m, t, rule), n in sorted(steps.items()))
            self.get_logger().info(f"permitted contacts, control steps by rule: {listed}")

    def _report_slowdown(self) -> None:
        now = time.monotonic()
        if now - self._slowdown_logged >= 30.0:
            self._slowdown_logged = now
            self.get_logger().warning(
                f"simulation fell behind real time {self.pacer.slowdowns} times ({self.pacer.slowed_s:.1f} s in "
                "all): sim time waited for the machine (it is loaded)"
            )

    def _publish_clock(self) -> None:
        self.clock_pub.publish(Clock(clock=common_convert.time_to_msg(self.world.time)))

    def _stamp(self) -> TimeMsg:
        """The time of the state being published: under use_sim_time the world's own time,
        not the node clock, which lags whenever its /clock messages wait behind rendering."""
        return common_convert.time_to_msg(self.world.time) if self._sim_time else self.get_clock().now().to_msg()

    def _publish_state(self) -> None:
        stamp = self._stamp()
        # by the URDF's names and conventions, as the real arm's driver publishes them
        joints = self.world.joint_states()
        self.joint_pub.publish(common_convert.joint_state_msg(list(joints), np.array(list(joints.values())), stamp))
        self.pose_pub.publish(common_convert.pose_msg(*self.world.ee_pose(), stamp))
        self.width_pub.publish(Float64(data=self.world.gripper_width()))

    def _publish_cameras(self, rig: CameraRig) -> None:
        stamp = self._stamp()
        for camera, mujoco_name in _CAMERAS.items():
            publishers = self.camera_pubs[camera]
            # The truth masks (sim/camera/...) only while a benchmark or test listens: a third
            # of the rendering time otherwise spent on what no robot has.
            truth = any(publishers[i].get_subscription_count() > 0 for i in _TRUTH_STREAMS)
            frame = rig.render(self.world.data, mujoco_name, segmentation=truth)
            msgs = convert.camera_msgs(frame, f"{camera}_camera_optical", stamp)
            for index, (publisher, msg) in enumerate(zip(publishers, msgs, strict=True)):
                if truth or index not in _TRUTH_STREAMS:
                    publisher.publish(msg)

    def _reject(self, reason: str) -> None:
        self.get_logger().warning(f"command rejected, arm holds: {reason}")
        self.reject_pub.publish(String(data=reason))

    # -- ROS callbacks -------------------------------------------------------------------
    def _on_chunk(self, msg: ActionChunk) -> None:
        try:
            chunk = common_convert.chunk_from_msg(msg)
            refused = self.link.admit(msg)
            if refused is not None:
                raise InvalidChunk(refused)
            with self.lock:
                self.driver.submit(chunk, self.world.time)
        except InvalidChunk as exc:
            with self.lock:
                self.driver.hold()
            self._reject(f"chunk {msg.chunk_id}: {exc}")

    def _refused(self, request: Any, response: Any, allowed: tuple[str, ...], what: str) -> bool:
        """Fill `response` and return True when `request` is not signed by one of `allowed`."""
        who, why = authorize(self.requests, request, allowed, what, self.get_logger())
        if who is None:
            response.status, response.message = response.STATUS_UNAUTHORIZED, why
        return who is None

    def _on_reset(self, request: SimReset.Request, response: SimReset.Response) -> SimReset.Response:
        # A reset sets the driver's clock back: an operator's to ask for, proven by signature.
        if self._refused(request, response, OPERATORS, f"sim/reset (seed {request.seed})"):
            return response
        if request.scene and request.scene != self.world.scene.name:
            response.status = SimReset.Response.STATUS_INVALID_ARGUMENT
            response.message = (
                f"sim_node runs scene {self.world.scene.name!r}; to use {request.scene!r}, restart it with "
                f"`carryon up --set sim_node.scene={request.scene}`"
            )
            return response
        with self.lock:
            self._record_violations(self.monitor.finish(self.world.time))
            self._log_permitted()
            self.monitor.violations.clear()  # counted since the last reset
            self.monitor.permitted_steps.clear()
            with self.link.lock:  # the clock goes back: the driver's guard must not take it for a jump
                self.world.reset(int(request.seed))
                self.link.clock_reset()
            self.driver.hold()
            self.monitor.set_task(ContactTask(), self.world.time)
        response.status = SimReset.Response.STATUS_OK
        response.message = f"scene {self.world.scene.name!r} reset with seed {request.seed}"
        response.objects = [o.name for o in self.world.scene.spec.objects]
        return response

    def _on_perturb(self, request: SimPerturb.Request, response: SimPerturb.Response) -> SimPerturb.Response:
        if self._refused(request, response, OPERATORS, f"sim/perturb {request.kind} of {request.object!r}"):
            return response
        kind = _PERTURBATION_KINDS.get(request.kind)
        if kind is None:
            response.status = SimPerturb.Response.STATUS_INVALID_ARGUMENT
            response.message = f"unknown perturbation kind {request.kind}; valid: {sorted(_PERTURBATION_KINDS)}"
            return response
        d = request.displacement
        try:
            names_location = kind in ("relocate", "place")
            spec = PerturbationSpec(
                kind=kind,
                object=request.object,
                by=(d.x, d.y, d.z),
                location=request.location if names_location else "",
                item=request.location if kind == "cover" else "",
            )
            with self.lock:
                self.world.perturb(spec)
        except (KeyError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            response.status = SimPerturb.Response.STATUS_INVALID_ARGUMENT
            response.message = str(exc)
            return response
        response.status = SimPerturb.Response.STATUS_OK
        response.message = f"{kind} applied"
        return response

    def _publish_truth(self) -> None:
        msg = SimTruth(scene=self.world.scene.name, collisions=len(self.monitor.violations))
        msg.header.stamp = self._stamp()
        msg.header.frame_id = convert.WORLD_FRAME
        msg.objects = [convert.object_to_msg(o) for o in object_truths(self.world)]
        self.truth_pub.publish(msg)

    def _on_state(self, _request: SimState.Request, response: SimState.Response) -> SimState.Response:
        with self.lock:
            objects = object_truths(self.world)
            response.sim_time_s = self.world.time
            response.scene = self.world.scene.name
            response.gripper_width_m = self.world.gripper_width()
            response.collisions = len(self.monitor.violations)
        response.objects = [convert.object_to_msg(o) for o in objects]
        response.status = SimState.Response.STATUS_OK
        return response

    def _on_set_task(self, request: SetTask.Request, response: SetTask.Response) -> SetTask.Response:
        if self._refused(request, response, OPERATOR_OR_PLANNER, f"sim/set_task {request.subtask_id!r}"):
            return response
        task = ContactTask(
            request.subtask_id,
            request.target,
            request.source,
            request.destination,
            tuple(request.permitted_contacts),
        )
        objects = {o.name for o in self.world.scene.spec.objects} | {"table"}
        places = objects | set(self.world.scene.spec.locations)  # a source or destination may be a place
        unknown = sorted(
            (({task.target, *task.permitted} - objects) | ({task.source, task.destination} - places)) - {""}
        )
        if unknown:
            response.status = SetTask.Response.STATUS_NOT_FOUND
            response.message = f"not in scene {self.world.scene.name!r}: {', '.join(unknown)}"
            return response
        with self.lock:
            self.monitor.set_task(task, self.world.time)
        response.status = SetTask.Response.STATUS_OK
        whole = sorted(rules.touchable(task))
        support = rules.supports(task, known=objects - {"table"})
        response.message = f"subtask {task.subtask_id!r}: contacts permitted with {', '.join(whole) or 'nothing'}" + (
            f"; {', '.join(support)} only in the support patch at the target" if support else ""
        )
        return response

    def destroy_node(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)
        with self.lock:
            self._record_violations(self.monitor.finish(self.world.time))
            self._log_permitted()
        super().destroy_node()


def main() -> int:
    return run_node(SimNode)
