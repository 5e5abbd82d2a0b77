"""policy_node: runs the frozen VLA on one instruction at a time and publishes chunks.

RunPolicy goal -> backend.reset(instruction) -> every `steps_per_inference` control
periods: observation (latest robot state, images, and for the stand-in simulator ground
truth; nothing older than `max_observation_age_s`) -> backend.infer -> checks -> one
ActionChunk on policy/chunk stamped with the observation's id and stamp, plus its
InferenceTiming on policy/timing. Chunks go to the shield, never to the driver.

Outcomes: an unknown instruction aborts with STATUS_REFUSED listing the known skills; a
backend failure (server down or slow, missing camera) or no fresh observation for
`observation_timeout_s` aborts with STATUS_FAILED and the reason; an output with NaN or
out-of-range steps is dropped and reported on policy/dropped (three in a row fail the
goal). Cancel suspends: nothing more is published and the result says how far it got.
One goal runs at a time; a second one is aborted with the name of the running subtask.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from geometry_msgs.msg import PoseStamped
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64, String

from carryon_common import convert as common_convert
from carryon_common import scheduling
from carryon_common.core import names
from carryon_common.core.chunk import Chunk
from carryon_common.core.status import implemented
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import qos_for
from carryon_common.request_auth import OPERATOR_OR_PLANNER, authorize
from carryon_interfaces.action import RunPolicy
from carryon_interfaces.msg import ActionChunk, InferenceTiming, SimTruth
from carryon_policy import convert
from carryon_policy.core.backends import kinematics_for, make_policy
from carryon_policy.core.checks import check_output
from carryon_policy.core.config import PolicyConfig
from carryon_policy.core.observation import ObservationBuffer, StaleObservation, Width
from carryon_policy.core.policy import InvalidAction, Observation, Policy, PolicyError, PolicyOutput, UnknownInstruction
from carryon_policy.core.runner import ChunkRunner, ChunksDropped, RunProgress
from carryon_policy.core.timing import InferenceRecord

CAPABILITIES = (
    implemented("policy.run", "RunPolicy action: observations -> backend -> chunks at the control rate"),
    implemented(
        "policy.backend",
        "backends openpi_remote, lerobot_local and those installed packages register (entry points "
        "carryon.policy_backends: the simulation harness's sim_scripted, sim_scripted_safe)",
    ),
)
MAX_DROPPED_IN_A_ROW = 3
# The node clock going back by more than this (a simulator reset) restarts a goal's schedule.
JUMP_BACK_S = 0.5
ARM_JOINTS = tuple(f"panda_joint{i}" for i in range(1, 8))


class GoalEnded(Exception):
    """Internal: the goal finished early with `status` and `message`."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class PolicyNode(CarryOnNode):
    """`policy`: an injected backend (tests); None builds the one the config names."""

    def __init__(self, policy: Policy | None = None, **node_kwargs: Any) -> None:
        super().__init__(names.POLICY_NODE, PolicyConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: PolicyConfig = self.config
        kinematics = kinematics_for(cfg) if policy is None else None
        self.policy = policy if policy is not None else make_policy(cfg, kinematics)
        # joint positions in the order the VLA's joint actions use (the robot file's), else the Panda's
        self._joint_order = tuple(kinematics.joint_names) if kinematics is not None else ()
        meta = self.policy.metadata
        label = meta.backend + (" (SCRIPTED STAND-IN, not a VLA)" if meta.scripted else "")
        self.set_backends({"policy": label})
        # The chunk's send on the control path, the model's inference not (carryon_common/scheduling.py).
        self.send_section = scheduling.RealtimeSection(cfg.chunk_send_priority, "sending chunks")
        self.send_section.probe()
        if cfg.chunk_send_priority:
            self.add_backend("scheduling", self.send_section.note)
        if meta.scripted:
            self.get_logger().warning(f"policy backend is a {meta.description}")
        self.buffer = ObservationBuffer(
            cameras=meta.cameras, needs_truth=meta.needs_ground_truth, max_age_s=cfg.max_observation_age_s
        )
        self.dt = 1.0 / cfg.control_rate_hz
        self._goals = 0
        self._active: str | None = None
        self._active_lock = threading.Lock()
        self._wake = threading.Event()

        sensors = MutuallyExclusiveCallbackGroup()
        self.create_subscription(
            PoseStamped, names.EE_POSE, self._on_ee, qos_for(names.EE_POSE), callback_group=sensors
        )
        self.create_subscription(
            JointState, names.JOINT_STATES, self._on_joints, qos_for(names.JOINT_STATES), callback_group=sensors
        )
        self.create_subscription(
            Float64, names.GRIPPER_WIDTH, self._on_width, qos_for(names.GRIPPER_WIDTH), callback_group=sensors
        )
        for camera in meta.cameras:
            self.create_subscription(
                Image,
                names.camera_topic(camera, "color"),
                lambda msg, c=camera: self._on_image(c, msg),
                qos_for(names.camera_topic(camera, "color")),
                callback_group=sensors,
            )
        if meta.needs_ground_truth:
            self.create_subscription(
                SimTruth, names.SIM_TRUTH, self._on_truth, qos_for(names.SIM_TRUTH), callback_group=sensors
            )
        self.chunk_pub = self.create_publisher(ActionChunk, names.POLICY_CHUNK, qos_for(names.POLICY_CHUNK))
        self.timing_pub = self.create_publisher(InferenceTiming, names.POLICY_TIMING, qos_for(names.POLICY_TIMING))
        self.dropped_pub = self.create_publisher(String, names.POLICY_DROPPED, qos_for(names.POLICY_DROPPED))
        self._server = ActionServer(
            self,
            RunPolicy,
            names.RUN_POLICY,
            execute_callback=self._execute,
            goal_callback=lambda _goal: GoalResponse.ACCEPT,
            cancel_callback=lambda _handle: CancelResponse.ACCEPT,
            callback_group=ReentrantCallbackGroup(),
        )
        self.add_readiness_check(self._readiness)
        self.set_ready()

    def _readiness(self) -> str | None:
        """Degraded while an inference could not run: inputs missing or stale, or (a remote
        backend) its server not answering."""
        _parts, problems = self.buffer.parts(self.now_s())
        server = getattr(self.policy, "unavailable", None)
        reason = server() if callable(server) else None
        if reason:
            problems.append(reason)
        return "cannot infer: " + "; ".join(problems) if problems else None

    # -- sensors ---------------------------------------------------------------------

    def _on_ee(self, msg: PoseStamped) -> None:
        self.buffer.ee = convert.ee_from_msg(msg)

    def _on_joints(self, msg: JointState) -> None:
        try:
            order = self._joint_order or (ARM_JOINTS if "panda_joint1" in msg.name else ())
            self.buffer.joints = convert.joints_from_msg(msg, order)
        except ValueError as exc:
            self.get_logger().warning(f"ignoring joint_states: {exc}", throttle_duration_sec=5.0)

    def _on_width(self, msg: Float64) -> None:
        self.buffer.width = Width(stamp_s=self.now_s(), width_m=float(msg.data))  # Float64 has no stamp

    def _on_image(self, camera: str, msg: Image) -> None:
        try:
            self.buffer.images[camera] = convert.image_from_msg(msg)
        except ValueError as exc:
            self.get_logger().warning(f"ignoring camera/{camera}/color: {exc}", throttle_duration_sec=5.0)

    def _on_truth(self, msg: SimTruth) -> None:
        self.buffer.truth = convert.truth_from_msg(msg)

    # -- RunPolicy -------------------------------------------------------------------
    def _execute(self, goal_handle: Any) -> RunPolicy.Result:
        request = goal_handle.request
        result = RunPolicy.Result()
        # Who may set the VLA going: an operator or the planner's executive, proven by signature.
        what = f"RunPolicy {request.instruction!r} for {request.subtask_id!r}"
        who, why = authorize(self.requests, request, OPERATOR_OR_PLANNER, what, self.get_logger())
        if who is None:
            result.status, result.message = RunPolicy.Result.STATUS_UNAUTHORIZED, why
            goal_handle.abort()
            return result
        with self._active_lock:
            busy = self._active
            if busy is None:
                self._active = request.subtask_id or "(no subtask)"
        if busy is not None:
            result.status = RunPolicy.Result.STATUS_FAILED
            result.message = f"busy: already running subtask {busy!r}; cancel it first"
            goal_handle.abort()
            return result
        try:
            self._run(goal_handle, result)
        except GoalEnded as ended:
            result.status = ended.status
            result.message = str(ended)
        except Exception as exc:  # noqa: BLE001 - a backend bug must end the goal, not the node
            self.get_logger().error(f"RunPolicy failed: {exc!r}")
            result.status = RunPolicy.Result.STATUS_FAILED
            result.message = f"internal error: {exc!r}"
        finally:
            with self._active_lock:
                self._active = None
        if result.status == RunPolicy.Result.STATUS_BUDGET_EXHAUSTED:
            goal_handle.succeed()
        elif result.status == RunPolicy.Result.STATUS_SUSPENDED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        else:
            goal_handle.abort()
            self.get_logger().warning(f"RunPolicy {request.instruction!r}: {result.message}")
        return result

    def _run(self, goal_handle: Any, result: RunPolicy.Result) -> None:
        cfg: PolicyConfig = self.config
        request = goal_handle.request
        budget = int(request.step_budget) or cfg.default_step_budget
        self._goals += 1
        try:
            self.policy.reset(request.instruction, cfg.seed + self._goals)
        except UnknownInstruction as exc:
            raise GoalEnded(RunPolicy.Result.STATUS_REFUSED, str(exc)) from None
        except PolicyError as exc:
            raise GoalEnded(RunPolicy.Result.STATUS_FAILED, str(exc)) from None
        backend = self.policy.metadata.backend

        def check(out: PolicyOutput, observation: Observation) -> None:
            check_output(out, observation.robot.ee_position, max_step_m=cfg.max_step_m, max_step_rad=cfg.max_step_rad)

        runner = ChunkRunner(
            self.policy,
            dt=self.dt,
            steps_per_inference=cfg.steps_per_inference,
            subtask_id=request.subtask_id,
            horizon=cfg.chunk_horizon,
            check=check,
            max_dropped_in_a_row=MAX_DROPPED_IN_A_ROW,
        )
        progress = RunProgress()
        try:
            runner.run(_GoalPort(self, goal_handle, progress), budget, progress)
        except ChunksDropped as exc:
            raise GoalEnded(RunPolicy.Result.STATUS_FAILED, str(exc)) from None
        except UnknownInstruction as exc:
            raise GoalEnded(RunPolicy.Result.STATUS_REFUSED, str(exc)) from None
        except PolicyError as exc:
            raise GoalEnded(RunPolicy.Result.STATUS_FAILED, f"{backend}: {exc}") from None
        finally:
            result.steps_executed = progress.steps_executed
            result.chunks_sent = progress.chunks_sent
        result.status = RunPolicy.Result.STATUS_BUDGET_EXHAUSTED
        result.message = f"ran the step budget ({budget} steps, {result.chunks_sent} chunks)"

    def _wait_until(self, goal_handle: Any, progress: RunProgress, target_s: float, since_s: float) -> float:
        """Wait for the node clock (sim time in simulation) to reach `target_s`, watching
        for cancel; a clock that stops for `observation_timeout_s` fails the goal. `since_s`:
        the schedule's latest time. Returns the time the schedule goes on from: `target_s`,
        or the clock's time once it reads more than JUMP_BACK_S below `since_s` or an earlier
        reading (a simulator reset: waiting for the old time would stall the goal)."""
        cfg: PolicyConfig = self.config
        last_clock, last_change = max(self.now_s(), since_s), time.monotonic()
        # A simulator clock built from float steps lands a hair before round times
        # (1.0499999 s): a tolerance keeps such a tick from costing a whole period.
        slack = min(1e-3, self.dt / 10.0)
        while (now := self.now_s()) < target_s - slack:
            _check_cancel(goal_handle, progress)
            if now < last_clock - JUMP_BACK_S:
                self.get_logger().warning(f"the node clock jumped back {last_clock - now:.2f} s (a simulator reset?)")
                return now
            if now != last_clock:
                last_clock, last_change = now, time.monotonic()
            elif time.monotonic() - last_change > cfg.observation_timeout_s:
                raise GoalEnded(
                    RunPolicy.Result.STATUS_FAILED,
                    f"the node clock stopped for {cfg.observation_timeout_s} s (no /clock from the simulator?)",
                )
            self._wake.wait(0.002)
        return target_s

    def destroy_node(self) -> None:
        self.policy.close()
        super().destroy_node()


def _check_cancel(goal_handle: Any, progress: RunProgress) -> None:
    if goal_handle.is_cancel_requested:
        raise GoalEnded(
            RunPolicy.Result.STATUS_SUSPENDED,
            f"suspended after {progress.steps_executed} steps and {progress.chunks_sent} chunks",
        )


class _GoalPort:
    """The ChunkPort of one RunPolicy goal: observations from the sensor buffer on the node
    clock, chunks and timings published, steps paced by the node clock, cancel watched."""

    def __init__(self, node: PolicyNode, goal_handle: Any, progress: RunProgress) -> None:
        self.node = node
        self.goal_handle = goal_handle
        self.progress = progress
        self.config: PolicyConfig = node.config
        self.observed_s = 0.0  # node clock when the latest observation was taken
        self.next_s = node.now_s()
        self.last_fresh = time.monotonic()

    def observe(self, steps_executed: int) -> tuple[float, Observation]:
        node, cfg = self.node, self.config
        while True:
            _check_cancel(self.goal_handle, self.progress)
            now = node.now_s()
            try:
                observation = node.buffer.build(now, steps_executed)
            except StaleObservation as exc:
                if time.monotonic() - self.last_fresh > cfg.observation_timeout_s:
                    raise GoalEnded(
                        RunPolicy.Result.STATUS_FAILED, f"{exc} for {cfg.observation_timeout_s} s"
                    ) from None
                node.get_logger().warning(str(exc), throttle_duration_sec=2.0)
                node._wake.wait(min(node.dt, 0.05))
                continue
            self.last_fresh = time.monotonic()
            self.observed_s = now
            return now, observation

    def send(self, chunk: Chunk, record: InferenceRecord) -> None:
        with self.node.send_section():
            stamp = self.node.stamp_now()
            self.node.chunk_pub.publish(common_convert.chunk_to_msg(chunk, stamp))
        self.node.timing_pub.publish(convert.timing_to_msg(record, stamp))

    def _wait(self, target_s: float, progress: RunProgress) -> None:
        """Until the node clock reaches `target_s`; after a jump back the schedule goes on from now."""
        self.next_s = self.node._wait_until(self.goal_handle, progress, target_s, max(self.next_s, self.observed_s))
        self.observed_s = min(self.observed_s, self.next_s)

    def dropped(self, error: InvalidAction) -> None:
        backend = self.node.policy.metadata.backend
        self.node.dropped_pub.publish(String(data=f"{backend}: chunk dropped: {error}"))
        self.node.get_logger().warning(f"chunk dropped: {error}")

    def skip(self) -> None:
        self._wait(self.observed_s + self.config.steps_per_inference * self.node.dt, self.progress)

    def advance(self, steps: int, progress: RunProgress) -> bool:
        self._wait(max(self.next_s, self.observed_s) + steps * self.node.dt, progress)
        self.goal_handle.publish_feedback(
            RunPolicy.Feedback(
                steps_executed=progress.steps_executed + steps,
                chunks_sent=progress.chunks_sent,
                last_infer_s=progress.last_infer_s,
            )
        )
        return False


def main() -> int:
    return run_node(PolicyNode)
