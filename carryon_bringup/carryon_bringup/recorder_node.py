"""recorder_node: records the graph's topics as a rosbag2 (MCAP) and serves them live to
Foxglove (see core/recorder.py for what and why).

Topics are found by name (every `discovery_period_s` until all are seen) and subscribed
raw: the CDR bytes go to the bag and to the Foxglove server unchanged, with the
`ros2msg` definition of their type (standard types from rosbags' typestore, CarryOn's
from carryon_interfaces' .msg files). Images and point clouds are thinned to
`heavy_rate_hz`. The bag is closed (and readable) when the node stops.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import threading
import time
from pathlib import Path
from typing import Any

from ament_index_python.packages import get_package_share_directory
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from carryon_bringup.core.recorder import IMAGE_TYPES, RecorderConfig, interface_msg_files, qualified
from carryon_common.core import names
from carryon_common.core.errors import ConfigError
from carryon_common.core.status import implemented
from carryon_common.node import CarryOnNode, run_node

CAPABILITIES = (
    implemented("recorder.bag", "rosbag2 (MCAP) of the graph's topics, for ros2 bag play, Foxglove, carryon replay"),
    implemented("recorder.foxglove", "live Foxglove WebSocket server of the same topics (foxglove_port)"),
)


def message_class(type_name: str) -> Any:
    """`pkg/msg/Name` -> the generated Python class."""
    package, _, name = type_name.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


class Recorder(CarryOnNode):
    def __init__(self, **node_kwargs: Any) -> None:
        super().__init__(names.RECORDER_NODE, RecorderConfig, capabilities=CAPABILITIES, **node_kwargs)
        cfg: RecorderConfig = self.config
        namespace = self.get_namespace()
        self.wanted = {qualified(namespace, t) for t in cfg.topics}
        self.typestore = get_typestore(Stores.ROS2_KILTED)
        custom: dict[str, Any] = {}
        for type_name, text in interface_msg_files([Path(get_package_share_directory("carryon_interfaces"))]).items():
            custom.update(get_types_from_msg(text, type_name))
        self.typestore.register(custom)
        self.lock = threading.Lock()
        self.writer: Writer | None = None
        self.bag_path: Path | None = None
        if cfg.record:
            self.bag_path = self._bag_path()
            self.writer = Writer(self.bag_path, version=9, storage_plugin=StoragePlugin.MCAP)
            self.writer.open()
        self.server: Any = None
        if cfg.foxglove_port:
            import foxglove

            self.server = foxglove.start_server(name="carryon", host=cfg.foxglove_host, port=cfg.foxglove_port)
        self.connections: dict[str, Any] = {}
        self.channels: dict[str, Any] = {}
        self.last_heavy: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.subscriptions_by_topic: dict[str, Any] = {}
        live = f"{cfg.foxglove_host}:{cfg.foxglove_port}" if cfg.foxglove_port else "off"
        self.set_backends({"bag": str(self.bag_path) if self.bag_path else "off", "foxglove": live})
        self.create_timer(cfg.discovery_period_s, self._discover)
        self._discover()
        self.set_ready()

    def _bag_path(self) -> Path:
        cfg: RecorderConfig = self.config
        if cfg.bag_dir:
            path = Path(cfg.bag_dir)
        elif os.environ.get(names.RUN_DIR_ENV):
            path = Path(os.environ[names.RUN_DIR_ENV]) / "bag"
        else:
            path = Path(f"bag-{dt.datetime.now():%Y%m%d-%H%M%S}")
        if path.exists():
            raise ConfigError(f"bag_dir {path} already exists: a recording is never overwritten")
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _discover(self) -> None:
        missing = self.wanted - set(self.subscriptions_by_topic)
        if not missing:
            return
        for topic, types in self.get_topic_names_and_types():
            if topic not in missing or not types:
                continue
            type_name = types[0]
            try:
                cls = message_class(type_name)
                msgdef, _ = self.typestore.generate_msgdef(type_name, ros_version=2)
                rihs01 = self.typestore.hash_rihs01(type_name)
            except (ImportError, AttributeError, KeyError, ValueError) as exc:
                self.get_logger().warning(f"{topic}: cannot record type {type_name}: {exc}")
                self.subscriptions_by_topic[topic] = None
                continue
            qos = self._qos_for(topic)
            with self.lock:
                if self.writer is not None:
                    self.connections[topic] = self.writer.add_connection(topic, type_name, msgdef=msgdef,
                                                                         rihs01=rihs01)  # fmt: skip
                if self.server is not None:
                    import foxglove

                    schema = foxglove.Schema(name=type_name, encoding="ros2msg", data=msgdef.encode())
                    self.channels[topic] = foxglove.Channel(topic, schema=schema, message_encoding="cdr")
            heavy = type_name in IMAGE_TYPES
            self.subscriptions_by_topic[topic] = self.create_subscription(
                cls, topic, lambda data, t=topic, h=heavy: self._on_message(t, h, data), qos, raw=True
            )
            self.get_logger().info(f"recording {topic} ({type_name})")

    def _qos_for(self, topic: str) -> QoSProfile:
        """Reliable, and transient local when a publisher latches (plan state, e-stop)."""
        qos = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        infos = self.get_publishers_info_by_topic(topic)
        if infos and all(i.qos_profile.reliability == ReliabilityPolicy.BEST_EFFORT for i in infos):
            qos.reliability = ReliabilityPolicy.BEST_EFFORT
        if infos and any(i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos):
            qos.durability = DurabilityPolicy.TRANSIENT_LOCAL
        return qos

    def _on_message(self, topic: str, heavy: bool, data: bytes) -> None:
        now = time.time_ns()
        if heavy:
            if now - self.last_heavy.get(topic, 0) < 1e9 / self.config.heavy_rate_hz:
                return
            self.last_heavy[topic] = now
        with self.lock:
            self.counts[topic] = self.counts.get(topic, 0) + 1
            if self.writer is not None and topic in self.connections:
                self.writer.write(self.connections[topic], now, data)
            channel = self.channels.get(topic)
        if channel is not None:
            channel.log(bytes(data), log_time=now)

    def destroy_node(self) -> None:
        with self.lock:
            if self.writer is not None:
                self.writer.close()
                self.writer = None
                total = sum(self.counts.values())
                self.get_logger().info(f"bag closed: {self.bag_path} ({total} messages, {len(self.counts)} topics)")
        if self.server is not None:
            self.server.stop()
            self.server = None
        super().destroy_node()


def main() -> int:
    return run_node(Recorder)
