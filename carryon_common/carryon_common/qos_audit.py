"""Incompatible QoS between the graph's publishers and subscribers, found by graph
introspection (issue 22).

DDS does not connect a publisher and a subscription whose QoS are incompatible (a
best-effort publisher and a reliable subscription; a volatile publisher and a
transient-local subscription): the subscriber then receives nothing, and says so only in a
log line ("No messages will be sent"). `qos_mismatches` lists every such pair the node
can see, for `carryon status` and the graph tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from rclpy.node import Node
from rclpy.qos import QoSCompatibility, qos_check_compatible


@dataclass(frozen=True)
class QosMismatch:
    topic: str
    publisher: str
    subscriber: str
    reason: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.publisher} -> {self.subscriber}: {self.reason}"


def qos_mismatches(node: Node, namespace: str = "") -> list[QosMismatch]:
    """Every publisher / subscription pair on the topics under `namespace` (all topics when
    "") that DDS will not connect, sorted by topic."""
    prefix = "/" + namespace.strip("/") + "/" if namespace.strip("/") else "/"
    found: list[QosMismatch] = []
    for topic, _types in sorted(node.get_topic_names_and_types()):
        if not topic.startswith(prefix):
            continue
        subscriptions = node.get_subscriptions_info_by_topic(topic)
        if not subscriptions:
            continue
        for publisher in node.get_publishers_info_by_topic(topic):
            for subscription in subscriptions:
                compatible, reason = qos_check_compatible(publisher.qos_profile, subscription.qos_profile)
                if compatible == QoSCompatibility.ERROR:
                    found.append(
                        QosMismatch(topic, publisher.node_name, subscription.node_name, reason.removeprefix("ERROR: "))
                    )
    return found
