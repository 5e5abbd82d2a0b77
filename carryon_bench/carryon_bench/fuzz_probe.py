"""The malformed-message probe of test_message_fuzz_graph.py and `carryon bench faults` (run
inside the graph's ROS domain: `python -m carryon_bench.fuzz_probe`): finds every topic
and service the named nodes subscribe to or serve (graph introspection), sends each the
malformed variants of its type (fuzz_messages.py), and prints what happened as JSON:
which nodes stopped answering after which message, how services answered, the drivers'
refusals, the shield's events and each node's status at the end.

After each message the probe asks every node that takes it for its status: the answer
means the node is still spinning (and paces the probe to the nodes)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from geometry_msgs.msg import Pose, Quaternion
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Header, String

from carryon_bench.fuzz_messages import raw_variants, variants
from carryon_common.calls import RosSession
from carryon_common.core import names
from carryon_common.request_auth import sign_request
from carryon_interfaces.msg import ActionStep, ShieldEvent
from carryon_interfaces.srv import GetStatus, SimPerturb

# Topics and services that are the middleware's or rclpy's, not messages a node acts on.
SKIPPED_TOPICS = ("/clock", "/parameter_events", "/rosout")
SKIPPED_SERVICE_SUFFIXES = ("parameters", "parameter_types", "parameters_atomically", "type_description")
ARM_JOINTS = [f"panda_joint{i}" for i in range(1, 8)]


def baselines(now: Any, objects: list[str]) -> dict[str, dict[str, Any]]:
    """Field values of a valid message of each type the drivers and the shield take (type
    name -> field -> value; others: the type's defaults)."""
    stamped = {"header": Header(frame_id="world", stamp=now)}
    return {
        "ActionChunk": {**stamped, "observation_stamp": now, "dt": 0.05, "steps": [ActionStep()]},
        "Image": {"height": 2, "width": 2, "encoding": "32FC1", "step": 8, "data": bytes(16)},
        "CameraInfo": {"width": 2, "height": 2, "k": [100.0, 0.0, 1.0, 0.0, 100.0, 1.0, 0.0, 0.0, 1.0]},
        "PoseStamped": {**stamped, "pose": Pose(orientation=Quaternion(w=1.0))},
        "Float64": {"data": 0.04},
        "SegmentationLabels": {"ids": [1], "names": ["a"]},
        "JointState": {"name": ARM_JOINTS, "position": [0.0] * len(ARM_JOINTS)},
        "EstopState": {"reason": "fuzz", "source": "fuzz"},
        # An engage: what a node must follow whatever its text says (its reason is stored and logged).
        "SetEstop_Request": {"active": True, "reason": "fuzz", "source": "fuzz"},
        "SetTask_Request": {"subtask_id": "s1", "target": objects[0]},
        "SimPerturb_Request": {"kind": SimPerturb.Request.KIND_DISPLACE, "object": objects[0]},
    }


class Fuzzer:
    def __init__(self, session: RosSession, namespace: str, pids: dict[str, int]) -> None:
        self.session, self.node, self.ns, self.pids = session, session.node, namespace, pids
        self.dead: dict[str, str] = {}  # node -> the message after which it stopped answering
        self.rejections: list[str] = []
        self.events: list[ShieldEvent] = []
        self.skip: list[str] = []  # variants not to send ("<topic or service> <- <label>" substrings)
        self.node.create_subscription(
            String, names.qualify(namespace, names.DRIVER_REJECTIONS), lambda m: self.rejections.append(m.data), 1000
        )
        events = names.qualify(namespace, names.SHIELD_EVENTS)
        self.node.create_subscription(ShieldEvent, events, self.events.append, 1000)

    def spin(self, seconds: float, until: Callable[[], bool] = lambda: False) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            self.session.executor.spin_once(timeout_sec=0.01)
        return until()

    def settle(self, quiet_s: float = 0.5, timeout_s: float = 10.0) -> None:
        """Spin until no refusal or shield event arrived for `quiet_s` (at most `timeout_s`):
        the last messages' answers are on their way when the nodes answered their status."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            seen = len(self.rejections) + len(self.events)
            if not self.spin(quiet_s, lambda seen=seen: len(self.rejections) + len(self.events) != seen):
                return

    def status(self, node_name: str, timeout_s: float = 10.0) -> Any | None:
        try:
            service = names.status_service(self.ns, node_name)
            return self.session.call(GetStatus, service, GetStatus.Request(), timeout_s)
        except Exception:  # noqa: BLE001 - no answer is what the probe reports
            return None

    def alive(self, node_name: str) -> bool:
        pid = self.pids.get(node_name)
        if pid is None:
            return True
        try:
            with open(f"/proc/{pid}/stat") as stat:  # noqa: PTH123
                return stat.read().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False

    def sync(self, takers: list[str], label: str) -> None:
        """Every node that took the message still answers; one that does not is recorded as
        stopped by it (its process gone or not)."""
        for name in takers:
            if name not in self.dead and self.status(name) is None:
                self.dead[name] = f"{label} ({'process exited' if not self.alive(name) else 'no answer'})"

    def topics(self, node_name: str) -> dict[str, str]:
        """topic -> type of everything `node_name` subscribes to (discovery may lag: retried)."""
        found: dict[str, str] = {}
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline:
            try:
                listed = self.node.get_subscriber_names_and_types_by_node(node_name, f"/{self.ns}")
            except Exception:  # noqa: BLE001 - the node not yet discovered
                listed = []
            found = {t: types[0] for t, types in listed if t not in SKIPPED_TOPICS}
            if found:
                break
            self.spin(0.2)
        return found

    def services(self, node_name: str) -> dict[str, str]:
        try:
            listed = self.node.get_service_names_and_types_by_node(node_name, f"/{self.ns}")
        except Exception:  # noqa: BLE001 - the node is gone (recorded as dead by then)
            return {}
        return {s: types[0] for s, types in listed if not s.endswith(SKIPPED_SERVICE_SUFFIXES)}

    def publisher(self, topic: str, msg_type: Any) -> Any:
        infos = self.node.get_subscriptions_info_by_topic(topic)
        latched = any(i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos)
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        qos.durability = DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE
        publisher = self.node.create_publisher(msg_type, topic, qos)
        self.spin(5.0, lambda: publisher.get_subscription_count() >= len(infos))
        return publisher

    def fuzz_topic(self, topic: str, msg_type: Any, baseline: Any, takers: list[str]) -> int:
        publisher = self.publisher(topic, msg_type)
        count = 0
        for label, payload in _all_variants(baseline):
            if any(skip in f"{topic} <- {label}" for skip in self.skip):
                continue
            if all(t in self.dead for t in takers):
                break
            publisher.publish(payload)
            count += 1
            self.sync(takers, f"{topic} <- {label}")
        self.node.destroy_publisher(publisher)
        return count

    def fuzz_service(self, service: str, srv_type: Any, baseline: Any, taker: str) -> list[list[Any]]:
        """Each variant of a request, signed as the test's operator (but for the variants of
        `auth` itself), so it reaches past the request's authentication."""
        client = self.session.client(srv_type, service)
        answers: list[list[Any]] = []
        for label, request in variants(baseline):
            if any(skip in f"{service} <- {label}" for skip in self.skip):
                continue
            if taker in self.dead:
                break
            if not label.startswith("auth."):
                with contextlib.suppress(Exception):  # a request the signer cannot take goes out unsigned
                    sign_request(self.session.identity, request)
            future = client.call_async(request)
            if self.spin(10.0, future.done) and future.exception() is None:
                response = future.result()
                answers.append([label, int(response.status), str(response.message)[:300]])
            else:
                future.cancel()
                answers.append([label, None, "no answer within 10 s"])
            self.sync([taker], f"{service} <- {label}")
        return answers


def _health(status: Any) -> dict[str, Any]:
    return {"state": status.state, "message": status.message, "backends": list(status.backends), "pid": status.pid}


def _all_variants(baseline: Any) -> Iterator[tuple[str, Any]]:
    yield from variants(baseline)
    yield from raw_variants(baseline)


def _type(type_name: str) -> Any:
    """'pkg/msg/Type' or 'pkg/srv/Type' -> the class."""
    package, kind, name = type_name.split("/")
    return getattr(importlib.import_module(f"{package}.{kind}"), name)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namespace", default=names.DEFAULT_NAMESPACE)
    parser.add_argument("--node", action="append", default=[], help="NAME=PID of a node to fuzz")
    parser.add_argument("--skip", action="append", default=[], help="leave out variants whose name holds this")
    parser.add_argument("--objects", default="", help="comma-separated names the set_task baselines may use")
    args = parser.parse_args()
    pids = {name: int(pid) for name, pid in (item.split("=") for item in args.node)}
    started = time.monotonic()
    with RosSession("message_fuzz_probe") as session:
        fuzzer = Fuzzer(session, args.namespace, pids)
        fuzzer.skip = args.skip
        for name in pids:
            if fuzzer.status(name, timeout_s=30.0) is None:
                fuzzer.dead[name] = "no status before fuzzing"
        now = session.node.get_clock().now().to_msg()
        fills = baselines(now, [o for o in args.objects.split(",") if o] or ["cube"])
        takers: dict[str, list[str]] = {}
        kinds: dict[str, str] = {}
        for name in pids:
            for topic, kind in fuzzer.topics(name).items():
                takers.setdefault(topic, []).append(name)
                kinds[topic] = kind
        counts: dict[str, int] = {}
        for topic in sorted(takers):
            msg_type = _type(kinds[topic])
            baseline = msg_type(**fills.get(msg_type.__name__, {}))
            counts[topic] = fuzzer.fuzz_topic(topic, msg_type, baseline, takers[topic])
        services: dict[str, list[list[Any]]] = {}
        for name in pids:
            for service, kind in sorted(fuzzer.services(name).items()):
                srv_type = _type(kind)
                baseline = srv_type.Request(**fills.get(srv_type.Request.__name__, {}))
                services[service] = fuzzer.fuzz_service(service, srv_type, baseline, name)
        fuzzer.settle()
        statuses = {}
        for name in pids:
            status = fuzzer.status(name)
            statuses[name] = None if status is None else _health(status.status)
    json.dump(
        {
            "topics": counts,
            "services": services,
            "dead": fuzzer.dead,
            "alive": {name: fuzzer.alive(name) for name in pids},
            "rejections": fuzzer.rejections[-2000:],
            "events": [[e.decision, e.reason[:300]] for e in fuzzer.events],
            "statuses": statuses,
            "seconds": time.monotonic() - started,
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
