"""Inputs that must come from one publisher (the shield's sensors, a driver's joint states).

The messages a safety decision rests on (camera depth, masks and labels, the tool pose, the
finger width) are not signed: signing every image would cost more than the decision. What
stands in for it is the graph itself: each of these topics has exactly one producer in a
correct graph (the robot driver or perception_node), and DDS tells a subscription how many
publishers it is matched with, synchronously and before any of a new publisher's data
arrives. So while a topic has more publishers than it should, none of its messages is used
and `problems()` says which topic and how many: a second, unauthenticated publisher (an
intruder, a forgotten `ros2 bag play`, a GUI slider, another robot's driver on the domain)
makes the decision fail closed instead of steering it. Under use_sim_time, the same holds
for /clock, which every stamp and age check reads.

What this does not stop: a process that replaces the one producer (kills it and publishes
in its place) is still a single publisher; only DDS security (SROS2 permissions) or keeping
other processes off the domain stops that (docs/security.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rclpy.node import Node
from rclpy.subscription import Subscription

CLOCK_TOPIC = "/clock"


class SingleSourceInputs:
    """A node's subscriptions whose topics must have at most `limit` publishers each."""

    def __init__(self, node: Node, limit: int = 1) -> None:
        self.node, self.limit = node, limit
        self._subscriptions: dict[str, Subscription[Any]] = {}
        self.dropped = 0  # messages not used because their topic had too many publishers
        self._sim_time = bool(node.get_parameter("use_sim_time").value)

    def subscribe(self, msg_type: Any, topic: str, callback: Callable[[Any], None], qos: Any, **kwargs: Any) -> Any:
        """`node.create_subscription`, but a message is passed on only while its topic has at
        most `limit` publishers."""
        holder: list[Subscription[Any]] = []

        def guarded(msg: Any) -> None:
            if holder[0].get_publisher_count() > self.limit:
                self.dropped += 1
                return
            callback(msg)

        subscription = self.node.create_subscription(msg_type, topic, guarded, qos, **kwargs)
        holder.append(subscription)
        self._subscriptions[subscription.topic_name] = subscription
        return subscription

    def problems(self) -> list[str]:
        """Each watched topic (and /clock under use_sim_time) with more than `limit`
        publishers, said as why its data is not used; empty when all is well (a few µs)."""
        counts = {topic: sub.get_publisher_count() for topic, sub in self._subscriptions.items()}
        if self._sim_time:
            counts[CLOCK_TOPIC] = self.node.count_publishers(CLOCK_TOPIC)
        return [
            f"{count} publishers on {topic} (at most {self.limit}): its data is not used"
            for topic, count in sorted(counts.items())
            if count > self.limit
        ]

    def describe(self) -> str:
        """For the node's status: what is watched."""
        clock = " and /clock" if self._sim_time else ""
        return f"{len(self._subscriptions)} topics{clock}, at most {self.limit} publisher(s) each"
