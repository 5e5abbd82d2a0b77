"""`carryon replay BAG`: play a recorded run back into ROS (for rviz) and / or a Foxglove
live server, at its recorded pace (`--rate` to speed up). Plain installs have no
`ros2 bag play`; on a robot PC either works.

Messages go out as recorded (raw CDR, no decoding), each topic with its recorded type;
`--prefix /replay` moves them under another namespace so a replay never mixes with a
live graph.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rosbags.rosbag2 import Reader

from carryon_bringup.recorder_node import message_class
from carryon_common.calls import RosSession
from carryon_common.qos import TopicKind, qos_for_qualified


def replay(
    bag: Path,
    *,
    rate: float = 1.0,
    prefix: str = "",
    topics: set[str] | None = None,
    ros: bool = True,
    foxglove_port: int = 0,
    progress: Callable[[int, float], None] = lambda _n, _t: None,
) -> int:
    """Publish the bag's messages; returns how many were sent."""
    session = RosSession("carryon_replay") if ros else None
    server: Any = None
    channels: dict[str, Any] = {}
    publishers: dict[str, Any] = {}
    sent = 0
    try:
        with Reader(bag) as reader:
            connections = [c for c in reader.connections if topics is None or c.topic in topics]
            if foxglove_port:
                import foxglove

                server = foxglove.start_server(name="carryon replay", port=foxglove_port)
            for c in connections:
                name = f"{prefix.rstrip('/')}{c.topic}" if prefix else c.topic
                if session is not None and c.topic not in publishers:
                    # the table's QoS for the graph's topics, so the graph's own subscribers get them
                    namespace = c.topic.strip("/").split("/")[0]  # the recorded graph's
                    qos = qos_for_qualified(c.topic, namespace, default=TopicKind.STATE)
                    publishers[c.topic] = session.node.create_publisher(message_class(c.msgtype), name, qos)
                if server is not None and c.topic not in channels:
                    import foxglove

                    schema = foxglove.Schema(name=c.msgtype, encoding="ros2msg", data=c.msgdef.data.encode())
                    channels[c.topic] = foxglove.Channel(name, schema=schema, message_encoding="cdr")
            if session is not None:
                _wait_for_subscribers(session, list(publishers.values()), MATCH_TIMEOUT_S)
            start_wall, start_bag = time.monotonic(), None
            for connection, stamp, raw in reader.messages(connections=connections):
                start_bag = stamp if start_bag is None else start_bag
                due = start_wall + (stamp - start_bag) * 1e-9 / rate
                while (wait := due - time.monotonic()) > 0:
                    if session is not None:
                        session.executor.spin_once(timeout_sec=min(wait, 0.05))
                    else:
                        time.sleep(min(wait, 0.05))
                if session is not None:
                    publishers[connection.topic].publish(bytes(raw))
                if connection.topic in channels:
                    channels[connection.topic].log(bytes(raw), log_time=stamp)
                sent += 1
                progress(sent, (stamp - start_bag) * 1e-9)
    finally:
        if server is not None:
            server.stop()
        if session is not None:
            session.close()
    return sent


MATCH_TIMEOUT_S = 5.0  # longest wait for subscribers (rviz, a test) before the first message, s


def _wait_for_subscribers(session: RosSession, publishers: list[Any], timeout_s: float) -> None:
    """Until every publisher has matched a subscriber, at most `timeout_s` (a topic nobody
    listens to is then played anyway): under load DDS discovery takes longer than a fixed
    pause, and the first messages would go to nobody."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(p.get_subscription_count() == 0 for p in publishers):
        session.executor.spin_once(timeout_sec=0.05)
    settle = time.monotonic() + 0.3  # the subscriber's side of the match may come a little later
    while time.monotonic() < settle:
        session.executor.spin_once(timeout_sec=0.05)
