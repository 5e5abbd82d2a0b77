"""The shield's e-stop and command key: the latched e-stop (estop/set, estop/state), kept
across restarts (a restarted shield comes back engaged); the signature on what the shield
publishes for the driver; the signed heartbeat on shield/heartbeat
(carryon_common.core.command_auth, docs/security.md)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

from carryon_common import signing
from carryon_common.core import names
from carryon_common.core.command_auth import EstopLatch, LatchState, latch_path, load_key
from carryon_common.core.security import INSECURE, insecure
from carryon_common.node import CarryOnNode
from carryon_common.qos import qos_for
from carryon_common.request_auth import Unauthorized, sign_decision
from carryon_interfaces.msg import EstopState
from carryon_interfaces.srv import SetEstop
from carryon_shield.core.config import ShieldConfig
from carryon_shield.core.gate import ShieldGate


class ShieldEstop:
    def __init__(self, node: CarryOnNode, cfg: ShieldConfig, gate: ShieldGate) -> None:
        self.node, self.cfg, self.gate = node, cfg, gate
        self.key = load_key(Path(cfg.command_key_file)) if cfg.command_key_file else None
        # Every signed message carries this run's session and the next sequence number.
        self.signer = signing.CommandSigner(self.key)
        node.add_backend("commands", "signed (HMAC-SHA256)" if self.key is not None else "NOT signed (no command key)")
        if self.key is None:
            on_purpose = f"{INSECURE} (security: insecure): " if insecure(cfg) else ""
            node.get_logger().warning(
                f"{on_purpose}no command_key_file: released chunks and e-stop states go out unsigned"
            )
        # Who may release: an operator in operators_file, proven by signature (engaging needs no proof).
        assert node.requests is not None  # ShieldConfig has an operators_file
        self.requests = node.requests
        self.state_pub = node.create_publisher(EstopState, names.ESTOP_STATE, qos_for(names.ESTOP_STATE))
        self.heartbeat_pub = node.create_publisher(EstopState, names.SHIELD_HEARTBEAT, qos_for(names.SHIELD_HEARTBEAT))
        self._lock = threading.Lock()  # the latch, between the service and the heartbeat thread
        self.latch = self._start_latch()
        gate.estop_active = self.latch.state.active
        self._publish_state()
        # Its own callback group (for a multi-threaded executor; shield_node spins one thread, so an
        # e-stop waits for the callback in progress: a decision on a ready obstacle set takes 1-5 ms
        # in `carryon bench latency`, one that must ground first for a new task longer).
        safety = MutuallyExclusiveCallbackGroup()
        node.create_service(SetEstop, names.ESTOP_SET, self._on_set_estop, callback_group=safety)
        # The heartbeat goes out from a thread of its own on the wall clock: a busy executor on a
        # loaded machine delays timers by hundreds of ms, which would stop the arm for nothing.
        # The executor's own timer proves it is alive; the thread stops beating when it is not.
        self._executor_alive = time.monotonic()
        node.create_timer(cfg.heartbeat_period_s, self._executor_tick, callback_group=safety)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="shield-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2.0)

    def sign(self, msg: Any, topic: str) -> Any:
        """Number and sign `msg` for the driver (a released chunk, a state, a heartbeat)."""
        return self.signer.sign(msg, topic)

    def _start_latch(self) -> EstopLatch:
        """The e-stop latch as the last run of this shield left it; a restart comes back engaged."""
        cfg, name, now = self.cfg, self.node.get_name(), self.node.now_s()
        engaged = cfg.estop_engaged_at_start
        reason = "engaged at start-up (estop_engaged_at_start)" if engaged else "not engaged since start-up"
        latch = EstopLatch(latch_path(cfg.estop_latch_file, name), LatchState(engaged, reason, name, now))
        if latch.found_on_disk and cfg.estop_engaged_after_restart and not latch.state.active:
            latch.set(LatchState(True, f"{name} restarted: engaged until an operator releases it", name, now))
        if latch.state.active:
            self.node.get_logger().warning(f"emergency stop engaged at start-up: {latch.state.reason}")
        if latch.write_error:
            self.node.get_logger().error(latch.write_error)
        return latch

    def _state_msg(self) -> EstopState:
        """The state now in force, stamped now: a driver takes a release only while it is fresh."""
        with self._lock:
            state = self.latch.state
        msg = EstopState(active=state.active, reason=state.reason, source=state.source)
        msg.header.stamp = self.node.stamp_now()
        return self.signer.number(msg)

    def _publish_state(self) -> EstopState:
        msg = self._state_msg()
        # The node's signature for the audit first: the HMAC covers it.
        sign_decision(self.node.identity, msg, names.ESTOP_STATE)
        self.state_pub.publish(self.sign(msg, names.ESTOP_STATE))
        return msg

    def _on_set_estop(self, request: SetEstop.Request, response: SetEstop.Response) -> SetEstop.Response:
        source = request.source or "unknown"
        if not request.active:
            try:
                principal = self.requests.principal(request, ("operator:",))
            except Unauthorized as exc:
                self.node.get_logger().warning(f"e-stop release REFUSED ({source}): {exc}")
                response.status, response.message = SetEstop.Response.STATUS_UNAUTHORIZED, f"release refused: {exc}"
                response.state = self._state_msg()
                return response
            source = f"{source} [{principal}]" if principal else source
        self.gate.estop_active = request.active  # first: the gate stops even if the latch file cannot be written
        with self._lock:
            self.latch.set(LatchState(request.active, request.reason, source, self.node.now_s()))
            write_error = self.latch.write_error
        response.state = self._publish_state()
        logger = self.node.get_logger()
        if write_error:
            logger.error(write_error)
        # rclpy ties a logging call site to one severity: one call per severity.
        if request.active:
            logger.warning(f"emergency stop ENGAGED by {source}: {request.reason}")
        else:
            logger.info(f"emergency stop released by {source}: {request.reason}")
        response.status = SetEstop.Response.STATUS_OK
        response.message = "emergency stop engaged" if request.active else "emergency stop released"
        return response

    def _executor_tick(self) -> None:
        self._executor_alive = time.monotonic()

    def _beat(self) -> None:
        while not self._stopping.wait(self.cfg.heartbeat_period_s):
            if time.monotonic() - self._executor_alive > self.cfg.executor_stall_s:
                continue  # callbacks no longer run (deadlocked, stalled): the driver stops the arm
            if self.node.now_s() <= 0.0:
                continue  # on sim time before the first /clock: a stamp of 0 would be refused as stale
            try:
                self.heartbeat_pub.publish(self.sign(self._state_msg(), names.SHIELD_HEARTBEAT))
            except Exception as exc:  # noqa: BLE001 - a missed beat stops the arm; the thread must live on
                if not self._stopping.is_set():
                    self.node.get_logger().error(f"heartbeat not sent: {exc!r}", throttle_duration_sec=5.0)
