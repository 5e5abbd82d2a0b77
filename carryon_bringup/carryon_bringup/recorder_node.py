"""recorder_node: records the graph's topics as a rosbag2 (MCAP), serves them live to
Foxglove (see core/recorder.py for what and why), and writes the audit log: every
decision seen on the graph (plans, validation, subtask states and recoveries, shield
blocks, verdicts, memory changes, e-stop) appended to a hash-chained JSONL file
(core/audit_feed.py decides what is a decision; `carryon audit verify` checks it).

Topics are found by name (every `discovery_period_s` until all are seen) and subscribed
raw: the CDR bytes go to the bag and to the Foxglove server unchanged, with the
`ros2msg` definition of their type (standard types from rosbags' typestore, CarryOn's
from carryon_interfaces' .msg files). Images and point clouds are thinned to
`heavy_rate_hz` (`dataset_rate_hz` > 0 adds what carryon_policy.bag_dataset needs and keeps
the policy's cameras at that rate). The bag is closed (and readable) when the node stops.
"""

from __future__ import annotations

import datetime as dt
import importlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ament_index_python.packages import get_package_share_directory
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosbags.rosbag2 import StoragePlugin, Writer

from carryon_bringup.core.audit_feed import AuditFeed, Entry
from carryon_bringup.core.recorder import (
    IMAGE_TYPES,
    RecorderConfig,
    keep_period_ns,
    qualified,
    recorded_topics,
    typestore_for,
)
from carryon_common.convert import plan_state_name, subtask_state_name
from carryon_common.core import names
from carryon_common.core.audit import AuditLog
from carryon_common.core.command_auth import create_key_file, load_key
from carryon_common.core.errors import ConfigError
from carryon_common.core.status import implemented
from carryon_common.node import CarryOnNode, run_node
from carryon_common.qos import qos_for
from carryon_common.request_auth import DecisionCheck, Unauthorized
from carryon_interfaces.msg import EstopState, MemoryChange, PlanState, ShieldEvent, Verdict
from carryon_judge.core.types import VerdictStatus
from carryon_shield.core.gate import Decision

CAPABILITIES = (
    implemented("recorder.bag", "rosbag2 (MCAP) of the graph's topics, for ros2 bag play, Foxglove, carryon replay"),
    implemented("recorder.foxglove", "live Foxglove WebSocket server of the same topics (foxglove_port)"),
    implemented("recorder.audit", "hash-chained audit log of every decision seen on the graph"),
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
        self.wanted = {qualified(namespace, t) for t in recorded_topics(cfg)}
        self.keep_period_ns = {t: keep_period_ns(cfg, t, namespace) for t in self.wanted}
        self.typestore = typestore_for([Path(get_package_share_directory("carryon_interfaces"))])
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
        self.audit: AuditLog | None = None
        self.feed = AuditFeed()
        if cfg.audit:
            key, unkeyed = None, "hash chain only (audit_key_file '')"
            if cfg.audit_key_file:
                key_file = Path(cfg.audit_key_file).expanduser()
                try:
                    key = load_key(create_key_file(key_file))
                except OSError as exc:  # e.g. a read-only home: record anyway, and say so loudly
                    unkeyed = f"hash chain only: NO MACs, the audit key {key_file} cannot be made ({exc})"
                    self.get_logger().error(f"audit log without MACs: {unkeyed}")
            self.audit = AuditLog(self._audit_path(), key=key)
            self.add_backend("audit", f"hash chain + MACs (key {cfg.audit_key_file})" if key else unkeyed)
            self.decisions = DecisionCheck(cfg.publishers_file)
            self.add_backend(
                "decisions",
                "signed by their nodes (publishers_file)"
                if self.decisions.secured
                else "NOT verified (no publishers_file)",
            )
            self._audit_topics()
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

    def _audit_path(self) -> Path:
        cfg: RecorderConfig = self.config
        if cfg.audit_file:
            return Path(cfg.audit_file)
        if self.bag_path is not None:
            return self.bag_path.parent / "audit.jsonl"
        return Path(os.environ.get(names.RUN_DIR_ENV, ".")) / "audit.jsonl"

    def _log(self, entries: list[Entry]) -> None:
        if self.audit is None:
            return
        for kind, source, data in entries:
            self.audit.append(kind, source, data)

    def _audit_topics(self) -> None:
        def on_plan(m: PlanState) -> None:
            subs = [(s.subtask.id, subtask_state_name(s.state), s.message) for s in m.subtasks]
            self._log(
                self.feed.plan_state(
                    plan_id=m.plan_id,
                    user=m.user_id,
                    request=m.request,
                    state=plan_state_name(m.state),
                    message=m.message,
                    reply=m.reply,
                    plan_json=m.plan_json,
                    subtasks=subs,
                )
            )

        def on_event(m: ShieldEvent) -> None:
            decision = Decision(m.decision).name.lower()
            self._log(
                self.feed.shield_event(
                    chunk_id=int(m.chunk_id),
                    subtask_id=m.subtask_id,
                    decision=decision,
                    released=int(m.released_steps),
                    total=int(m.total_steps),
                    reason=m.reason,
                    obstacle=m.blocking_obstacle,
                )
            )

        def on_verdict(m: Verdict) -> None:
            self._log(self.feed.verdict(m.subtask_id, VerdictStatus(m.status).name.lower(), m.reason, m.backend))

        def on_memory(m: MemoryChange) -> None:
            self._log(
                self.feed.memory_change(
                    version=int(m.version),
                    file=m.file,
                    entity=m.entity,
                    key=m.key,
                    previous=m.previous_value,
                    new=m.new_value,
                    source=m.source,
                )
            )

        def on_estop(m: EstopState) -> None:
            self._log(self.feed.estop(m.active, m.source, m.reason))

        ns = self.get_namespace()
        for msg_type, topic, node, handle, qos in (
            (PlanState, names.PLAN_STATE, names.PLANNER_NODE, on_plan, qos_for(names.PLAN_STATE, depth=10)),
            (ShieldEvent, names.SHIELD_EVENTS, names.SHIELD_NODE, on_event, qos_for(names.SHIELD_EVENTS)),
            (Verdict, names.VERDICT, names.JUDGE_NODE, on_verdict, qos_for(names.VERDICT)),
            (MemoryChange, names.MEMORY_CHANGED, names.MEMORY_NODE, on_memory, qos_for(names.MEMORY_CHANGED)),
            (EstopState, names.ESTOP_STATE, names.SHIELD_NODE, on_estop, qos_for(names.ESTOP_STATE)),
        ):
            self.create_subscription(msg_type, qualified(ns, topic), self._checked(topic, node, handle), qos)

    def _checked(self, topic: str, node: str, handle: Callable[[Any], None]) -> Callable[[Any], None]:
        """`handle` for the messages on `topic` that `node` signed; the others are logged as forged."""

        def on_message(msg: Any) -> None:
            try:
                self.decisions.check(msg, topic, node)
            except Unauthorized as exc:
                self.get_logger().warning(
                    f"{topic}: a message not from {node} ({exc}): audited as forged", throttle_duration_sec=1.0
                )
                self._log(
                    self.feed.forged(topic=topic, node=node, reason=str(exc), message=str(msg), now_s=time.monotonic())
                )
                return
            handle(msg)

        return on_message

    def _discover(self) -> None:
        missing = self.wanted - set(self.subscriptions_by_topic)
        if not missing:
            return
        for topic, types in self.get_topic_names_and_types():
            if topic not in missing or not types:
                continue
            publishers = self.get_publishers_info_by_topic(topic)
            if not publishers:
                continue  # seen through a subscriber only: its publishers' QoS decide ours, next round
            type_name = types[0]
            try:
                cls = message_class(type_name)
                msgdef, _ = self.typestore.generate_msgdef(type_name, ros_version=2)
                rihs01 = self.typestore.hash_rihs01(type_name)
            except (ImportError, AttributeError, KeyError, ValueError) as exc:
                self.get_logger().warning(f"{topic}: cannot record type {type_name}: {exc}")
                self.subscriptions_by_topic[topic] = None
                continue
            qos = recording_qos([p.qos_profile for p in publishers])
            with self.lock:
                if self.writer is not None:
                    self.connections[topic] = self.writer.add_connection(topic, type_name, msgdef=msgdef, rihs01=rihs01)
                if self.server is not None:
                    import foxglove

                    schema = foxglove.Schema(name=type_name, encoding="ros2msg", data=msgdef.encode())
                    self.channels[topic] = foxglove.Channel(topic, schema=schema, message_encoding="cdr")
            heavy = type_name in IMAGE_TYPES
            self.subscriptions_by_topic[topic] = self.create_subscription(
                cls, topic, lambda data, t=topic, h=heavy: self._on_message(t, h, data), qos, raw=True
            )
            self.get_logger().info(f"recording {topic} ({type_name})")

    def _on_message(self, topic: str, heavy: bool, data: bytes) -> None:
        now = time.time_ns()
        if heavy:
            if now - self.last_heavy.get(topic, 0) < self.keep_period_ns[topic]:
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
        if self.audit is not None:
            self.audit.close()
            self.audit = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        super().destroy_node()


def recording_qos(publishers: list[QoSProfile]) -> QoSProfile:
    """A subscription every one of `publishers` connects to, as rosbag2 records: best effort
    when any publisher is (a reliable subscription gets nothing from a best-effort
    publisher), transient local only when all are (it gets nothing from a volatile one)."""
    qos = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
    if any(p.reliability == ReliabilityPolicy.BEST_EFFORT for p in publishers):
        qos.reliability = ReliabilityPolicy.BEST_EFFORT
    if publishers and all(p.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in publishers):
        qos.durability = DurabilityPolicy.TRANSIENT_LOCAL
    return qos


def main() -> int:
    return run_node(Recorder)
