"""One helper for calling services and actions with timeouts from outside a node's
executor (the operator CLI, the launcher's readiness probe, tests, benchmarks).

Every wait is bounded: an unreachable graph is an error within the timeout, never a
hang.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

import rclpy
from rclpy.client import Client
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from carryon_common.actions import ActionClient
from carryon_common.core import names
from carryon_common.core.errors import CarryOnError
from carryon_common.core.operator_auth import Identity
from carryon_common.request_auth import client_identity, sign_request
from carryon_interfaces.srv import GetStatus


class GraphUnreachable(CarryOnError):
    """A service or action server did not appear (or answer) within its timeout."""


def _domain_hint(domain_id: int, seen: Sequence[str]) -> str:
    """Where a client looked and what it found, for a 'not available' error: the domain and
    how many other nodes this participant discovered (none: wrong domain, no graph, or DDS
    discovery failed; some: the graph is there without the one asked for)."""
    where = (
        f"ROS_DOMAIN_ID={domain_id}, "
        f"ROS_AUTOMATIC_DISCOVERY_RANGE={os.environ.get('ROS_AUTOMATIC_DISCOVERY_RANGE', '(unset)')}"
    )
    if not seen:
        return f"{where}; this client discovered no other node"
    shown = ", ".join(seen[:12]) + (f", ... ({len(seen) - 12} more)" if len(seen) > 12 else "")
    return f"{where}; this client discovered {len(seen)} other node(s): {shown}"


class InvalidRequest(CarryOnError):
    """A request that cannot be sent as it is (see `check_sendable`)."""


def check_sendable(message: Any, where: str = "request") -> None:
    """Raise InvalidRequest for a string field holding a NUL character: ROS 2 strings end
    at the first NUL, so "alice\\x00evil" would arrive as "alice" and act on another name."""
    if isinstance(message, str):
        if "\x00" in message:
            raise InvalidRequest(f"{where} {message!r} contains a NUL character, which a ROS 2 string cannot carry")
    elif isinstance(message, list | tuple):
        for index, item in enumerate(message):
            check_sendable(item, f"{where}[{index}]")
    elif hasattr(message, "get_fields_and_field_types"):
        for field_name in message.get_fields_and_field_types():
            check_sendable(getattr(message, field_name), f"{where}.{field_name}")


class GoalLost(GraphUnreachable):
    """The action server went away (its node died or froze) while a goal was running."""


class _ServerWatch:
    """Is the server of a running goal still there? Its action services must stay in the
    graph (a node that exits cleanly leaves at once), and its node must answer `get_status`
    (a node killed with SIGKILL or frozen stays in DDS discovery for its lease, ~20 s) from
    the same process (a restarted node knows nothing of the goal)."""

    PING_EVERY_S = 0.5
    PING_TIMEOUT_S = 1.0  # a node answers in milliseconds: its status service has a thread of its own
    MISSES = 3  # status requests unanswered in a row: about 3.5 s after a node died or froze
    GONE_FOR_S = 1.0  # action services out of the graph this long

    def __init__(self, session: RosSession, client: ActionClient, name: str, server_node: str) -> None:
        self.session, self.client, self.name = session, client, name
        self.status_name = names.status_service("", server_node) if server_node else ""
        self.server_node = server_node
        self.gone_since: float | None = None
        self.ping: tuple[float, Any] | None = None  # (sent at, future)
        self.next_ping = time.monotonic()  # the first at once: the pid of the process that took the goal
        self.misses = 0
        self.pid: int | None = None  # of the server's process, from its first status answer

    def lost(self) -> str | None:
        now = time.monotonic()
        if self.client.server_is_ready():
            self.gone_since = None
        elif self.gone_since is None:
            self.gone_since = now
        elif now - self.gone_since >= self.GONE_FOR_S:
            return f"action server {self.name} left the graph (its node exited)"
        if not self.status_name:
            return None
        if self.ping is not None:
            sent, future = self.ping
            if future.done():
                self.misses, self.ping = 0, None
                pid = future.result().status.pid if future.result() is not None else None
                if self.pid is None:
                    self.pid = pid
                elif pid is not None and pid != self.pid:  # restarted by its restart policy
                    return f"{self.server_node} restarted (pid {self.pid} -> {pid})"
            elif now - sent > self.PING_TIMEOUT_S:
                future.cancel()
                self.misses, self.ping = self.misses + 1, None
                if self.misses >= self.MISSES:
                    return f"{self.server_node} stopped answering ({self.misses} status requests unanswered)"
        if self.ping is None and now >= self.next_ping:
            self.ping = (now, self.session.client(GetStatus, self.status_name).call_async(GetStatus.Request()))
            self.next_ping = now + self.PING_EVERY_S
        return None


class RosSession:
    """A short-lived rclpy context + node + executor used as a client of the graph.

    Use as a context manager; it owns its own rclpy Context so it can be created next
    to other ROS code in the same process. `domain_id` None = $ROS_DOMAIN_ID. Requests and
    goals with an `auth` field are signed as `identity` (default: this login's operator
    identity when it has one, see carryon_common.request_auth; None: unsigned).
    """

    def __init__(
        self, node_name: str = "carryon_client", domain_id: int | None = None, identity: Any = "login"
    ) -> None:
        self.identity: Identity | None = client_identity() if identity == "login" else identity
        self._context = Context()
        # No rclpy signal handlers: the owner (CLI, launcher, test) decides what Ctrl-C means.
        rclpy.init(context=self._context, args=[], domain_id=domain_id, signal_handler_options=SignalHandlerOptions.NO)
        self.node = Node(f"{node_name}_{os.getpid()}", context=self._context, start_parameter_services=False)
        self.executor = SingleThreadedExecutor(context=self._context)
        self.executor.add_node(self.node)
        self._clients: dict[tuple[Any, str], Client] = {}
        self._action_clients: dict[tuple[Any, str], ActionClient] = {}

    def __enter__(self) -> RosSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self._context)

    def where(self) -> str:
        """This session's domain and the other nodes it has discovered (for error messages)."""
        own = (self.node.get_namespace().rstrip("/") + "/" + self.node.get_name()).lstrip("/")
        seen = sorted(f"{ns.rstrip('/')}/{name}".lstrip("/") for name, ns in self.node.get_node_names_and_namespaces())
        return _domain_hint(self._context.get_domain_id(), [n for n in seen if n != own])

    # -- services ---------------------------------------------------------------
    def client(self, srv_type: Any, name: str) -> Client:
        key = (srv_type, name)
        if key not in self._clients:
            self._clients[key] = self.node.create_client(srv_type, name)
        return self._clients[key]

    def wait_for_services(self, services: Iterable[tuple[Any, str]], timeout_s: float) -> list[str]:
        """Wait until every (type, name) service is available or the timeout passes.

        Returns the names still unavailable (empty when all are up).
        """
        pending = {name: self.client(srv_type, name) for srv_type, name in services}
        deadline = time.monotonic() + timeout_s
        while pending:
            pending = {n: c for n, c in pending.items() if not c.service_is_ready()}
            if not pending or time.monotonic() >= deadline:
                break
            self.executor.spin_once(timeout_sec=0.05)
        return sorted(pending)

    def call(
        self,
        srv_type: Any,
        name: str,
        request: Any,
        timeout_s: float,
        *,
        wait_s: float | None = None,
        resend_s: float | None = None,
    ) -> Any:
        """Call a service and return its response.

        wait_s: how long the service may take to appear (default: timeout_s);
        timeout_s: how long the answer may take once it is there. resend_s: for
        idempotent requests only, send the request again when no answer arrived after
        this many seconds (DDS can drop a reply sent before the server matched a
        brand-new client). Raises GraphUnreachable when either wait runs out.
        """
        wait_s = timeout_s if wait_s is None else wait_s
        if self.wait_for_services([(srv_type, name)], wait_s):
            raise GraphUnreachable(f"service {name} is not available after {wait_s:.1f} s ({self.where()})")
        (response,) = self.call_many([(srv_type, name, request)], timeout_s, resend_s=resend_s)
        if response is None:
            raise GraphUnreachable(f"service {name} did not answer within {timeout_s:.1f} s")
        return response

    def call_many(
        self, calls: Sequence[tuple[Any, str, Any]], timeout_s: float, *, resend_s: float | None = None
    ) -> list[Any | None]:
        """Send every (type, name, request) at once and wait for the answers with one deadline.

        Returns the responses in order; None for a call not answered in time (or whose
        service failed). `resend_s` as in `call` (idempotent requests only).
        """
        for _srv_type, name, request in calls:
            check_sendable(request, name)
            sign_request(self.identity, request)
        pending: dict[int, list[Any]] = {}
        clients = []
        for index, (srv_type, name, request) in enumerate(calls):
            clients.append(self.client(srv_type, name))
            pending[index] = [clients[index].call_async(request)]
        responses: list[Any | None] = [None] * len(calls)
        deadline = time.monotonic() + timeout_s
        next_send = time.monotonic() + resend_s if resend_s else math.inf
        while pending:
            for index, futures in list(pending.items()):
                done = next((f for f in futures if f.done()), None)
                if done is not None:
                    if done.exception() is None:
                        responses[index] = done.result()
                    for future in futures:
                        future.cancel()
                    del pending[index]
            now = time.monotonic()
            if not pending or now >= deadline:
                break
            if resend_s and now >= next_send:
                for index, futures in pending.items():  # signed anew: the same signature twice is a replay
                    futures.append(clients[index].call_async(sign_request(self.identity, calls[index][2])))
                next_send = now + resend_s
            self.executor.spin_once(timeout_sec=min(0.05, max(0.0, deadline - now)))
        for futures in pending.values():
            for future in futures:
                future.cancel()
        return responses

    # -- actions ----------------------------------------------------------------
    def send_goal_and_wait(
        self,
        action_type: Any,
        name: str,
        goal: Any,
        *,
        server_timeout_s: float,
        result_timeout_s: float,
        feedback: Callable[[Any], None] | None = None,
        server_node: str = "",
    ) -> tuple[int, Any]:
        """Send a goal, wait for its result; returns (GoalStatus code, result).

        On a result timeout the goal is cancelled before GraphUnreachable is raised, and on
        Ctrl-C or SIGTERM before KeyboardInterrupt is re-raised, so nothing keeps running
        unattended. GoalLost is raised within seconds when the server goes away: its action
        services vanish from the graph, or `server_node` (the node's fully qualified name)
        stops answering its status service.
        """
        check_sendable(goal, name)
        sign_request(self.identity, goal)
        key = (action_type, name)
        if key not in self._action_clients:
            self._action_clients[key] = ActionClient(self.node, action_type, name)
        client = self._action_clients[key]
        deadline = time.monotonic() + server_timeout_s
        while not client.server_is_ready():
            if time.monotonic() >= deadline:
                raise GraphUnreachable(
                    f"action server {name} is not available after {server_timeout_s:.1f} s ({self.where()})"
                )
            self.executor.spin_once(timeout_sec=0.05)
        if feedback is not None:  # feedback sent before our subscription matched would be lost
            topic = f"{name.rstrip('/')}/_action/feedback"
            while self.node.count_publishers(topic) < 1 and time.monotonic() < deadline:
                self.executor.spin_once(timeout_sec=0.05)
            settle = time.monotonic() + 0.3
            while time.monotonic() < settle:
                self.executor.spin_once(timeout_sec=0.05)
        send = client.send_goal_async(goal, feedback_callback=(lambda m: feedback(m.feedback)) if feedback else None)
        self.executor.spin_until_future_complete(send, timeout_sec=server_timeout_s)
        if not send.done():
            raise GraphUnreachable(f"action server {name} did not accept the goal within {server_timeout_s:.1f} s")
        handle = send.result()
        if not handle.accepted:
            raise GraphUnreachable(f"action server {name} rejected the goal")
        result_future = handle.get_result_async()
        watch = _ServerWatch(self, client, name, server_node)
        deadline = time.monotonic() + result_timeout_s
        try:
            # Short spins: a SIGTERM (raised as KeyboardInterrupt) is handled within 0.1 s,
            # and a server that died is noticed, instead of one wait for the whole timeout.
            while not result_future.done():
                if time.monotonic() >= deadline:
                    cancel = handle.cancel_goal_async()
                    self.executor.spin_until_future_complete(cancel, timeout_sec=2.0)
                    raise GraphUnreachable(
                        f"action {name} produced no result within {result_timeout_s:.1f} s (goal cancelled)"
                    )
                self.executor.spin_once(timeout_sec=0.1)
                lost = watch.lost()
                if lost is not None and not result_future.done():
                    handle.cancel_goal_async()  # best effort: a frozen server that wakes must not go on unwatched
                    self.executor.spin_once(timeout_sec=0.1)
                    raise GoalLost(f"{lost}: the goal is lost (a cancel request was sent; what it did stays done)")
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the goal must not run on unattended
            cancel = handle.cancel_goal_async()
            self.executor.spin_until_future_complete(cancel, timeout_sec=2.0)
            self.executor.spin_until_future_complete(result_future, timeout_sec=5.0)
            raise
        wrapped = result_future.result()
        return int(wrapped.status), wrapped.result
