"""Base class and entry-point helper for every CarryOn node.

A CarryOn node declares one ROS parameter per field of its config class, answers
`~/get_status` with its readiness and capabilities (saying plainly which are not
implemented yet), and shuts down cleanly on Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import rclpy
from builtin_interfaces.msg import Time as TimeMsg
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile

from carryon_common import __version__, convert, scheduling
from carryon_common.actions import ActionClient, GoalRun, ServiceUnavailable
from carryon_common.barrier import CallbackBarrier, guarded_executor
from carryon_common.core import names
from carryon_common.core.config import ROS_BUILTIN_PARAMETERS, NodeConfig, build_config, param_fields
from carryon_common.core.errors import CarryOnError, ConfigError
from carryon_common.core.operator_auth import Identity
from carryon_common.core.security import check_security
from carryon_common.core.status import Capability, NodeHealth, NodeState
from carryon_common.qos import TopicKind, qos_of
from carryon_common.request_auth import RequestGate, load_node_identity, sign_request
from carryon_interfaces.srv import GetStatus

C = TypeVar("C", bound=NodeConfig)

# Exit codes of a node process (reported by `carryon up` when a node dies).
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2


def latched_qos(depth: int = 1) -> QoSProfile:
    """Reliable + transient local: late subscribers get the last message (estop, plan state);
    the table's `latched` kind (carryon_common.qos), for peers that name their own topics."""
    return qos_of(TopicKind.LATCHED, depth)


def declare_config(node: Node, config_cls: type[C]) -> C:
    """Declare one parameter per config field (defaults from the class), read them back
    (params files and `--ros-args -p` override them) and validate into `config_cls`.

    Parameters are dynamically typed so `20` in YAML satisfies a float field; the
    pydantic model is the single place types and ranges are checked.
    """
    values: dict[str, Any] = {}
    for field in param_fields(config_cls):
        descriptor = ParameterDescriptor(
            description=f"{field.description} [{field.type_name}]", dynamic_typing=True, read_only=True
        )
        default = field.default
        if isinstance(default, list) and not default:
            default = []  # an empty list declares as an empty byte array; the model converts it
        node.declare_parameter(field.name, default, descriptor)
        values[field.name] = node.get_parameter(field.name).value
    # rclpy has no public accessor for the overrides given on the command line / in params files.
    overrides = getattr(node, "_parameter_overrides", {})
    extra = sorted(name for name in overrides if name not in values and name not in ROS_BUILTIN_PARAMETERS)
    if extra:
        raise ConfigError(
            f"{node.get_name()}: {', '.join(extra)}: unknown parameter(s) (not fields of {config_cls.__name__})"
        )
    return build_config(config_cls, values, {}, f"node {node.get_fully_qualified_name()} parameters")


class CarryOnNode(CallbackBarrier, Node):
    """A node with a validated config, a readiness check and an honest capability list; no
    message it takes can crash it (carryon_common.barrier)."""

    def __init__(
        self,
        node_name: str,
        config_cls: type[C],
        *,
        capabilities: Iterable[Capability],
        **node_kwargs: Any,
    ) -> None:
        super().__init__(node_name, **node_kwargs)
        self._started = time.monotonic()
        self.config: Any = declare_config(self, config_cls)
        # Without its keys a node refuses to start on the robot profile (core/security.py).
        self.security = check_security(self.config, node_name)
        self._capabilities = tuple(capabilities)
        self._backends: tuple[str, ...] = ()
        self._state = NodeState.STARTING
        self._message = "starting"
        self._ready_message: str | None = None  # set_ready's message, shown again once the checks pass
        self._checks: list[Callable[[], str | None]] = []
        self.service_group = ReentrantCallbackGroup()
        # What this node signs its requests and published decisions with (request_auth): its
        # identity_file when its config has one (NodeIdentityConfig), else nothing.
        self.identity: Identity | None = load_node_identity(getattr(self.config, "identity_file", ""), node_name)
        # Who may ask this node (the signed requests it serves): its operators_file when its config
        # has one (OperatorAuthConfig), else None.
        self.requests = RequestGate(self.config.operators_file) if hasattr(self.config, "operators_file") else None
        # use_sim_time decides which clock every stamp and age check reads: fixed at start, so no
        # parameter call switches a running node onto a /clock someone else publishes.
        self.add_on_set_parameters_callback(self._fixed_at_start)
        self.create_service(
            GetStatus, names.GET_STATUS, self._on_get_status, callback_group=MutuallyExclusiveCallbackGroup()
        )

    def _fixed_at_start(self, parameters: list[Parameter[Any]]) -> SetParametersResult:
        """Refuse a run-time change of use_sim_time (the others are read-only: declare_config)."""
        for parameter in parameters:
            if parameter.name == "use_sim_time":
                return SetParametersResult(
                    successful=False, reason="use_sim_time is fixed when the node starts (docs/security.md)"
                )
        return SetParametersResult(successful=True)

    # -- time -------------------------------------------------------------------
    def now_s(self) -> float:
        """Seconds on the node clock (simulation time under use_sim_time)."""
        return float(self.get_clock().now().nanoseconds) * 1e-9

    def stamp_now(self) -> TimeMsg:
        """The node clock's now as a message stamp."""
        return self.get_clock().now().to_msg()

    # -- health -----------------------------------------------------------------
    def set_backends(self, backends: Mapping[str, str]) -> None:
        """Record which backend fills each role (reported as `role=name` in the status)."""
        self._backends = tuple(f"{role}={name}" for role, name in backends.items())

    def add_backend(self, role: str, name: str) -> None:
        """Record one more role (after `set_backends`)."""
        self._backends = (*self._backends, f"{role}={name}")

    def set_state(self, state: NodeState, message: str) -> None:
        if (state, message) != (self._state, self._message):
            # rclpy ties a logging call site to one severity: one call per severity.
            if state == NodeState.ERROR:
                self.get_logger().error(f"{state.name.lower()}: {message}")
            else:
                self.get_logger().info(f"{state.name.lower()}: {message}")
        self._state, self._message = state, message

    def set_ready(self) -> None:
        """Mark the node ready; the message says how much of it is scaffolding."""
        missing = [c.name for c in self._capabilities if not c.implemented]
        message = "ready"
        if missing:
            message += f"; not implemented yet: {', '.join(missing)}"
        self._ready_message = message
        self.set_state(NodeState.READY, message)
        self._check_readiness()

    def add_readiness_check(self, check: Callable[[], str | None]) -> None:
        """Something this node needs to do its job (fresh inputs, a server answering):
        `check` returns why it cannot now, or None. Once ready, the node is DEGRADED with
        every reason while any check fails, READY again when all pass; checked every second
        of wall time (a paused simulation clock does not stop it)."""
        if not self._checks:
            steady = Clock(clock_type=ClockType.STEADY_TIME)
            self.create_timer(1.0, self._check_readiness, MutuallyExclusiveCallbackGroup(), clock=steady)
        self._checks.append(check)

    def readiness_problems(self) -> list[str]:
        """What the readiness checks say stops this node from doing its job now."""
        problems = []
        for check in self._checks:
            try:
                reason = check()
            except Exception as exc:  # noqa: BLE001 - a failing check is a reason, never a dead timer
                reason = f"readiness check failed: {type(exc).__name__}: {exc}"
            if reason:
                problems.append(reason)
        return problems

    def _check_readiness(self) -> None:
        if self._ready_message is None or self._state not in (NodeState.READY, NodeState.DEGRADED):
            return
        problems = self.readiness_problems()
        if not problems:
            self.set_state(NodeState.READY, self._ready_message)
        elif self._state == NodeState.DEGRADED:
            self._message = "; ".join(problems)  # still degraded: logged when the state changed, not each second
        else:
            self.set_state(NodeState.DEGRADED, "; ".join(problems))

    def health(self) -> NodeHealth:
        return NodeHealth(
            node_name=self.get_fully_qualified_name(),
            pid=os.getpid(),
            state=self._state,
            message=self._message,
            uptime_s=time.monotonic() - self._started,
            version=__version__,
            backends=(
                f"security={self.security}",
                *(() if self.requests is None else (f"operators={self.requests.describe()}",)),
                *self._backends,
                *self.refusals.lines(),
            ),
            profile=os.environ.get(names.PROFILE_ENV, ""),
            capabilities=self._capabilities,
        )

    def _on_get_status(self, _request: GetStatus.Request, response: GetStatus.Response) -> GetStatus.Response:
        response.status = convert.health_to_msg(self.health(), self.stamp_now())
        return response

    # -- calling other nodes from a callback ----------------------------------------------
    def call_service(self, srv_type: Any, name: str, request: Any, timeout_s: float) -> Any:
        """Call another node's service from inside a callback (a service handler, an action's
        execute) and wait for the answer. The client gets its own reentrant callback group,
        so the multi-threaded executor delivers the response while this thread waits.
        Raises ServiceUnavailable when the service does not appear or answer in `timeout_s`."""
        clients: dict[tuple[Any, str], Any] = self.__dict__.setdefault("_service_clients", {})
        key = (srv_type, name)
        if key not in clients:
            clients[key] = self.create_client(srv_type, name, callback_group=ReentrantCallbackGroup())
        client = clients[key]
        deadline = time.monotonic() + timeout_s
        if not client.wait_for_service(timeout_sec=timeout_s):
            raise ServiceUnavailable(f"service {name} is not available after {timeout_s:.1f} s")
        done = threading.Event()
        future = client.call_async(sign_request(self.identity, request))
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(max(0.0, deadline - time.monotonic())):
            client.remove_pending_request(future)
            raise ServiceUnavailable(f"service {name} did not answer within {timeout_s:.1f} s")
        return future.result()

    def start_goal(
        self, action_type: Any, name: str, goal: Any, timeout_s: float, feedback: Callable[[Any], None] | None = None
    ) -> GoalRun:
        """Send an action goal from inside a callback without blocking on its result (the
        client gets its own reentrant callback group). Raises ServiceUnavailable when the
        server does not appear, or does not accept the goal, within `timeout_s`."""
        signed = sign_request(self.identity, goal)
        return GoalRun(self.action_client(action_type, name), name, signed, timeout_s, feedback)

    def action_client(self, action_type: Any, name: str) -> Any:
        """This node's client of action `name` (made once, with its own reentrant callback
        group). Make the ones a node will use at start-up: discovery then runs while it
        starts, not while the first goal waits."""
        clients: dict[tuple[Any, str], Any] = self.__dict__.setdefault("_action_clients", {})
        key = (action_type, name)
        if key not in clients:
            clients[key] = ActionClient(self, action_type, name, callback_group=ReentrantCallbackGroup())
        return clients[key]

    # -- scaffolding ---------------------------------------------------------------
    def capability(self, name: str) -> Capability:
        for cap in self._capabilities:
            if cap.name == name:
                return cap
        raise KeyError(f"{self.get_name()} declares no capability {name!r}")

    def not_implemented_message(self, capability: str) -> str:
        cap = self.capability(capability)
        return f"{self.get_name()}: {capability} is {cap.detail}"

    def serve_not_implemented(self, srv_type: Any, name: str, capability: str) -> None:
        """A service that answers every request with STATUS_NOT_IMPLEMENTED and says which issue brings it."""
        message = self.not_implemented_message(capability)

        def handle(_request: Any, response: Any) -> Any:
            response.status = srv_type.Response.STATUS_NOT_IMPLEMENTED
            response.message = message
            return response

        self.create_service(srv_type, name, handle, callback_group=self.service_group)

    def action_not_implemented(
        self, action_type: Any, name: str, capability: str, fill_result: Callable[[Any, str], None]
    ) -> ActionServer:
        """An action server that accepts goals and aborts them with a not-implemented result."""
        message = self.not_implemented_message(capability)

        def execute(goal_handle: Any) -> Any:
            result = action_type.Result()
            fill_result(result, message)
            goal_handle.abort()
            return result

        return ActionServer(
            self,
            action_type,
            name,
            execute_callback=execute,
            goal_callback=lambda _goal: GoalResponse.ACCEPT,
            cancel_callback=lambda _handle: CancelResponse.ACCEPT,
            callback_group=self.service_group,
        )


_PR_SET_PDEATHSIG = 1


def exit_with_launcher() -> None:
    """Under `carryon up`, have the kernel send SIGTERM when the launcher dies (Linux),
    so a crashed or SIGKILLed launcher never leaves orphaned nodes behind."""
    launcher = os.environ.get(names.LAUNCHER_PID_ENV)
    if not launcher or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != int(launcher):  # the launcher died before the request was armed
        os.kill(os.getpid(), signal.SIGTERM)


def run_node(factory: Callable[[], Node], args: list[str] | None = None, *, threads: int = 4) -> int:
    """Entry point shared by every node: init, spin, clean shutdown, meaningful exit code.

    `threads` > 1 spins a MultiThreadedExecutor, for nodes whose long callbacks (a physics
    step, a model call) must not hold back the rest. Its price in rclpy is high: the spinning
    thread rebuilds the wait set in Python and yields a task again until a worker (waiting
    for the GIL) starts it, so a node fed at a few hundred messages a second spends a whole
    core on it (arm_adapter_node with a 100 Hz controller and the shield's 40 Hz heartbeat:
    100 % of a core with 4 threads, 17 % with 1, and e-stop states handled up to 3 s late).
    A node whose callbacks are all short passes `threads=1` (a SingleThreadedExecutor).
    graph.yaml's `realtime_priority` (carryon_common.scheduling) is applied before ROS starts.

    Exit codes: 0 after Ctrl-C / SIGTERM, 2 for an invalid configuration, 1 when
    construction or spinning failed (the traceback is printed once).
    """
    # A crash in native code (MuJoCo's renderer, DDS, numpy) prints every thread's Python
    # stack to stderr, which `carryon up` shows under "NODE DIED" and keeps in the node's log.
    faulthandler.enable(all_threads=True)
    try:
        scheduling_note = scheduling.apply_realtime_priority(scheduling.requested_priority())
    except ValueError as exc:
        print(f"configuration error:\n{exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    rclpy.init(args=args if args is not None else sys.argv)
    exit_with_launcher()  # after rclpy.init: its SIGTERM handler turns the signal into a clean shutdown
    node: Node | None = None
    executor: Executor = guarded_executor(threads)
    code = EXIT_OK
    try:
        node = factory()
        # What start-up built (modules, models, meshes, kernels) goes to the permanent
        # generation: a full collection scans only what the node made since. Unfrozen, the
        # shield's full collections took 57-303 ms each, and no callback runs during one.
        gc.freeze()
        if isinstance(node, CarryOnNode) and scheduling_note != "normal":
            node.add_backend("scheduling", scheduling_note)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        code = EXIT_OK
    except ConfigError as exc:
        print(f"configuration error:\n{exc}", file=sys.stderr, flush=True)
        code = EXIT_CONFIG
    except CarryOnError as exc:
        print(f"start-up failed: {exc}", file=sys.stderr, flush=True)
        code = EXIT_ERROR
    except Exception:  # noqa: BLE001 - report once with the traceback, then exit non-zero
        if rclpy.ok():
            traceback.print_exc()
            code = EXIT_ERROR
        # else: Ctrl-C / SIGTERM arrived during start-up and shut the context down: a clean stop
    finally:
        executor.shutdown(timeout_sec=2.0)
        if node is not None:
            node.destroy_node()
        try:
            rclpy.try_shutdown()
        except Exception:  # noqa: BLE001 - a node that failed half-way through its constructor (reported above)
            if code == EXIT_OK:  # cannot always be destroyed by the context; only news if all else went well
                traceback.print_exc()
                code = EXIT_ERROR
    return code
