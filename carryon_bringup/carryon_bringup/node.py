"""The operator side of the graph: a readiness probe for the launcher and the client
behind every `carryon` command. Each call has a timeout; an absent graph is reported
as GraphUnreachable within seconds."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from sensor_msgs.msg import CompressedImage

from carryon_common.calls import GraphUnreachable, RosSession
from carryon_common.convert import msg_to_health
from carryon_common.core import names
from carryon_common.core.status import NodeHealth
from carryon_common.qos import qos_for
from carryon_common.qos_audit import QosMismatch, qos_mismatches
from carryon_interfaces.action import Assist, RunPolicy
from carryon_interfaces.msg import MemoryFact, SimTruth
from carryon_interfaces.srv import (
    Ask,
    GetContext,
    GetStatus,
    MemoryHistory,
    RememberImage,
    SetEstop,
    SetTask,
    SimPerturb,
    UpdateUser,
)

# Seconds between repeated status requests to a node that is not ready yet.
_REPOLL_S = 0.5
# Idempotent requests are sent again when no reply came within this many seconds.
_RESEND_S = 1.0


class ReadinessProbe:
    """Polls `~/get_status` of a set of nodes without blocking; call `step()` in a loop.

    A request without an answer is sent again every `_RESEND_S` (GetStatus is
    idempotent; DDS may drop the reply to a brand-new client)."""

    def __init__(self, namespace: str, node_names: Iterable[str]) -> None:
        self.session = RosSession("carryon_up_probe")
        self._services = {n: names.status_service(namespace, n) for n in node_names}
        self._pending: dict[str, list[Any]] = {}
        self._last_request: dict[str, float] = {}
        self.health: dict[str, NodeHealth] = {}

    def ready(self) -> set[str]:
        return {n for n, h in self.health.items() if h.ready}

    def step(self, timeout_s: float = 0.05) -> None:
        self.session.executor.spin_once(timeout_sec=timeout_s)
        now = time.monotonic()
        ready = self.ready()
        for name, service in self._services.items():
            if name in ready:
                continue
            futures = self._pending.get(name, [])
            done = next((f for f in futures if f.done() and f.exception() is None), None)
            if done is not None:
                self.health[name] = msg_to_health(done.result().status)
                for future in futures:
                    future.cancel()
                self._pending.pop(name)
                continue
            if now - self._last_request.get(name, -math.inf) >= _REPOLL_S:
                client = self.session.client(GetStatus, service)
                if client.service_is_ready():
                    futures.append(client.call_async(GetStatus.Request()))
                    self._pending[name] = futures[-3:]  # keep the latest few; older replies are moot
                    self._last_request[name] = now

    def forget(self, name: str) -> None:
        """Drop what is known of a node (e.g. after it restarted)."""
        self.health.pop(name, None)
        self._pending.pop(name, None)

    def close(self) -> None:
        self.session.close()


class GraphClient:
    """What an operator console does with `ros2 service call`, with timeouts."""

    def __init__(self, namespace: str, timeout_s: float, domain_id: int | None = None) -> None:
        self.namespace = namespace
        self.timeout_s = timeout_s
        self.session = RosSession("carryon_cli", domain_id=domain_id)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> GraphClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _name(self, relative: str) -> str:
        return names.qualify(self.namespace, relative)

    def statuses(self, node_names: Iterable[str], wait_s: float | None = None) -> dict[str, NodeHealth | None]:
        """Health of each node (None when it did not answer within the timeout); `wait_s`
        bounds the wait for their services to appear (default: the timeout)."""
        services = {n: names.status_service(self.namespace, n) for n in node_names}
        wait = self.timeout_s if wait_s is None else wait_s
        missing = set(self.session.wait_for_services([(GetStatus, s) for s in services.values()], wait))
        up = [node for node, service in services.items() if service not in missing]
        calls = [(GetStatus, services[node], GetStatus.Request()) for node in up]
        responses = self.session.call_many(calls, timeout_s=min(2.0, self.timeout_s), resend_s=_RESEND_S)
        answered = {node: msg_to_health(r.status) for node, r in zip(up, responses, strict=True) if r is not None}
        return {node: answered.get(node) for node in services}

    def running_nodes(self, groups: Iterable[Iterable[str]], wait_s: float = 2.0) -> set[str]:
        """Names of the nodes seen under the namespace, waiting up to `wait_s` for discovery
        (less once every node of one of `groups`, e.g. a profile, is seen)."""
        wanted, deadline = [set(g) for g in groups], time.monotonic() + wait_s
        while True:
            self.session.executor.spin_once(timeout_sec=0.1)
            ns = "/" + self.namespace
            seen = {name for name, namespace in self.session.node.get_node_names_and_namespaces() if namespace == ns}
            if any(group <= seen for group in wanted) or time.monotonic() > deadline:
                return seen

    def qos_mismatches(self) -> list[QosMismatch]:
        """Publisher / subscription pairs under the namespace that DDS will not connect."""
        return qos_mismatches(self.session.node, self.namespace)

    def ask(self, user_id: str, text: str, plan_only: bool, timeout_s: float) -> Ask.Response:
        request = Ask.Request(user_id=user_id, text=text, plan_only=plan_only)
        # Not idempotent: never resent.
        return self.session.call(Ask, self._name(names.ASK), request, timeout_s, wait_s=self.timeout_s)

    def memory_context(self, user_id: str) -> GetContext.Response:
        request = GetContext.Request(user_id=user_id)
        name = self._name(names.MEMORY_GET_CONTEXT)
        return self.session.call(GetContext, name, request, self.timeout_s, resend_s=_RESEND_S)

    def memory_set(self, user_id: str, entity: str, key: str, value: str, source: str) -> UpdateUser.Response:
        """Store one durable fact ("" as value removes it)."""
        fact = MemoryFact(entity=entity, key=key, value=value, durable=True, source=source)
        request = UpdateUser.Request(user_id=user_id, facts=[fact], source=source)
        # Setting a value is idempotent (the second identical request changes nothing), so a lost reply is resent.
        name = self._name(names.MEMORY_UPDATE_USER)
        return self.session.call(UpdateUser, name, request, self.timeout_s, resend_s=_RESEND_S)

    def remember_image(
        self, user_id: str, entity: str, key: str, *, image: tuple[str, bytes], source: str
    ) -> RememberImage.Response:
        """Store a reference image of a user's object; `image` = (format png / jpeg, encoded bytes),
        checked by memory_node."""
        kind, data = image
        msg = CompressedImage(format=kind, data=data)
        request = RememberImage.Request(user_id=user_id, entity=entity, key=key, image=msg, source=source)
        # Not resent: each accepted image is a new file.
        return self.session.call(RememberImage, self._name(names.MEMORY_REMEMBER_IMAGE), request, self.timeout_s)

    def memory_history(self, file: str, limit: int, restore_version: int = 0) -> MemoryHistory.Response:
        """Journal entries, newest first; with restore_version > 0 that version is restored first."""
        request = MemoryHistory.Request(file=file, limit=limit, restore_version=restore_version)
        name = self._name(names.MEMORY_HISTORY)
        # A restore is never resent: another change may land between the two requests.
        resend = _RESEND_S if restore_version == 0 else None
        return self.session.call(MemoryHistory, name, request, self.timeout_s, resend_s=resend)

    def set_task(self, subtask_id: str, target: str, source: str, destination: str) -> SetTask.Response:
        """Tell the shield what the task's target, source and destination are (not obstacles)."""
        request = SetTask.Request(subtask_id=subtask_id, target=target, source=source, destination=destination)
        name = self._name(names.SHIELD_SET_TASK)
        return self.session.call(SetTask, name, request, self.timeout_s, resend_s=_RESEND_S)

    def run_policy(
        self, instruction: str, step_budget: int, subtask_id: str, feedback: Callable[[Any], None] | None = None
    ) -> tuple[int, RunPolicy.Result]:
        """Run the VLA on one instruction until its budget is spent; (GoalStatus code, result).
        Waits at most the budget's duration at 20 Hz plus a minute (a slow simulator)."""
        goal = RunPolicy.Goal(instruction=instruction, step_budget=step_budget, subtask_id=subtask_id)
        status, result = self.session.send_goal_and_wait(
            RunPolicy,
            self._name(names.RUN_POLICY),
            goal,
            server_timeout_s=self.timeout_s,
            result_timeout_s=step_budget / 20.0 * 4 + 60.0,
            feedback=feedback,
            server_node=self._name(names.POLICY_NODE),
        )
        return status, result

    def assist(
        self, user_id: str, text: str, timeout_s: float, feedback: Callable[[Any], None] | None = None
    ) -> tuple[int, Assist.Result]:
        """Carry out a request end to end (planner_node's Assist); (GoalStatus code, result).
        Ctrl-C or `timeout_s` cancel it (the arm holds)."""
        goal = Assist.Goal(user_id=user_id, text=text)
        status, result = self.session.send_goal_and_wait(
            Assist,
            self._name(names.ASSIST),
            goal,
            server_timeout_s=self.timeout_s,
            result_timeout_s=timeout_s,
            feedback=feedback,
            server_node=self._name(names.PLANNER_NODE),
        )
        return status, result

    def watch(self, msg_type: Any, relative: str, callback: Callable[[Any], None]) -> None:
        """Subscribe to a graph topic; `callback` runs while this client waits on anything."""
        self.session.node.create_subscription(msg_type, self._name(relative), callback, qos_for(relative))

    def perturb(self, request: SimPerturb.Request) -> SimPerturb.Response:
        """Apply a perturbation in the simulator (not resent: it is not idempotent)."""
        return self.session.call(SimPerturb, self._name(names.SIM_PERTURB), request, self.timeout_s)

    def prepare_perturb(self) -> None:
        """Discover sim/perturb now, so a perturbation sent later goes out at once."""
        missing = self.session.wait_for_services([(SimPerturb, self._name(names.SIM_PERTURB))], self.timeout_s)
        if missing:
            raise GraphUnreachable(f"service {missing[0]} is not available (is sim_node running?)")

    def wait_until_lifted(
        self, name: str, lift_m: float, timeout_s: float, near: tuple[str, float] | None = None
    ) -> tuple[float, float, float]:
        """Wait (sim/truth) until `name` is held and at least `lift_m` above where it lay
        when last not held, and (with `near` = (other object, metres)) within that
        horizontal distance of the other object; returns its position then.
        TimeoutError after `timeout_s`."""
        rest: dict[str, float] = {}
        found: list[tuple[float, float, float]] = []

        def on_truth(msg: SimTruth) -> None:
            where = {obj.name: obj for obj in msg.objects}
            obj = where.get(name)
            if obj is None or found:
                return
            p = obj.pose.position
            if not obj.grasped:
                rest["z"] = p.z
                return
            if "z" not in rest or p.z < rest["z"] + lift_m:
                return
            if near is not None:
                other = where.get(near[0])
                if other is None or math.hypot(p.x - other.pose.position.x, p.y - other.pose.position.y) > near[1]:
                    return
            found.append((p.x, p.y, p.z))

        sub = self.session.node.create_subscription(
            SimTruth, self._name(names.SIM_TRUTH), on_truth, qos_for(names.SIM_TRUTH)
        )
        deadline = time.monotonic() + timeout_s
        try:
            while not found:
                if time.monotonic() > deadline:
                    where = f" within {near[1]:.2f} m of {near[0]}" if near else ""
                    raise TimeoutError(f"{name} was not lifted by {lift_m:.2f} m{where} within {timeout_s:.0f} s")
                self.session.executor.spin_once(timeout_sec=0.05)
        finally:
            self.session.node.destroy_subscription(sub)
        return found[0]

    def engage_estop(self, reason: str) -> dict[str, SetEstop.Response | None]:
        """Engage the e-stop at the shield and at the robot driver at once (each keeps its own
        latch: a frozen shield does not keep the driver from stopping). None: no answer."""
        request = SetEstop.Request(active=True, reason=reason, source="cli")
        where = {"shield": names.ESTOP_SET, "driver": names.DRIVER_ESTOP_SET}
        calls = [(SetEstop, self._name(service), request) for service in where.values()]
        answers = self.session.call_many(calls, self.timeout_s, resend_s=_RESEND_S)
        return dict(zip(where, answers, strict=True))

    def set_estop(self, active: bool, reason: str) -> SetEstop.Response:
        request = SetEstop.Request(active=active, reason=reason, source="cli")
        # Idempotent (sets a state), so a lost reply is simply asked for again.
        return self.session.call(SetEstop, self._name(names.ESTOP_SET), request, self.timeout_s, resend_s=_RESEND_S)
