"""A robot driver's link to the shield (sim_node, arm_adapter_node): its own latched e-stop
(estop/state from the shield, and its own driver/estop/set service to engage), the
shield's signature and sequence on every released chunk and state, the shield's heartbeat,
and its own clock, which must not jump back (carryon_common.core.command_auth)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup

from carryon_common import convert, signing
from carryon_common.core import names
from carryon_common.core.command_auth import CommandGuard, EstopLatch, LatchState, latch_path, load_key, order_path
from carryon_common.core.driver import DriverCommandConfig
from carryon_common.core.replay import SenderOrder
from carryon_common.core.security import INSECURE, insecure
from carryon_common.node import CarryOnNode
from carryon_common.qos import qos_for
from carryon_interfaces.msg import ActionChunk, EstopState
from carryon_interfaces.srv import SetEstop


class DriverLink:
    """Owns the driver's CommandGuard, behind a lock of its own: e-stop states and heartbeats
    are taken at once, never behind the driver's control loop (a simulator that fell behind
    real time holds its lock almost all the time). `now_s` is the driver's clock; the driver
    asks `blocked` every control period and holds the arm when it says so; `on_engage`, when
    given, holds it at once (called outside the guard's lock); `report` publishes a refusal
    on driver/rejections."""

    def __init__(
        self,
        node: CarryOnNode,
        config: DriverCommandConfig,
        now_s: Callable[[], float],
        report: Callable[[str], None],
        on_engage: Callable[[], None] | None = None,
    ) -> None:
        self.node, self.now_s = node, now_s
        self.lock = threading.Lock()
        self._last_heartbeat_report = -float("inf")
        self.pauses = 0  # times the arm stopped mid-chunk for a late heartbeat
        self._pausing = False
        self._last_pause_report = -float("inf")
        self.on_engage, self.report = on_engage, report
        key = load_key(Path(config.command_key_file)) if config.command_key_file else None
        path = latch_path(config.estop_latch_file, node.get_name())
        latch = EstopLatch(path, LatchState(False, "not engaged since start-up", node.get_name()))
        self.guard = CommandGuard(
            key,
            latch,
            config.shield_heartbeat_timeout_s,
            max_age_s=config.command_max_age_s,
            heartbeat_pause_s=config.shield_heartbeat_pause_s,
            order=SenderOrder(order_path(path)),
            max_clock_jump_back_s=config.max_clock_jump_back_s,
        )
        if self.guard.order.load_error:
            node.get_logger().error(f"{self.guard.order.load_error}: e-stop engaged until an operator releases it")
        # Said in every line about what is not verified: on purpose (security: insecure) or not.
        self._unverified = f"{INSECURE} (security: insecure): " if insecure(config) else ""
        if key is None:
            node.get_logger().warning(
                f"{self._unverified}no command_key_file: released chunks and e-stop states are NOT verified (any "
                "process on the DDS domain can command this driver); `carryon up` and the launch file give the "
                "driver a key"
            )
        if latch.state.active:
            node.get_logger().warning(f"e-stop latch engaged at start-up: {latch.state.reason} ({path})")
        node.add_backend("commands", f"signed by the shield (key {config.command_key_file})" if key else "NOT verified")
        group = MutuallyExclusiveCallbackGroup()
        node.create_subscription(
            EstopState, names.ESTOP_STATE, self._on_state, qos_for(names.ESTOP_STATE), callback_group=group
        )
        node.create_subscription(
            EstopState,
            names.SHIELD_HEARTBEAT,
            self._on_heartbeat,
            qos_for(names.SHIELD_HEARTBEAT),
            callback_group=group,
        )
        node.create_service(SetEstop, names.DRIVER_ESTOP_SET, self._on_set_estop, callback_group=group)

    def admit(self, msg: ActionChunk) -> str | None:
        """Why a chunk on shield/chunk must not be queued (None: queue it)."""
        received = signing.signed(msg, names.SHIELD_CHUNK)
        if self.guard.key is None:
            self.node.get_logger().warning(
                f"{self._unverified}chunk {msg.chunk_id} taken without verifying who sent it (no command key)",
                throttle_duration_sec=10.0,
            )
        with self.lock:
            now_s = self._observe_clock()
            reason = self.guard.admit_chunk(received, now_s, time.monotonic())
            return reason if reason is not None else self.guard.blocked(time.monotonic())

    def blocked(self, _now_s: float) -> str | None:
        """Why no step may run now (the e-stop, the shield's heartbeat, the driver's clock
        jumping back), or None. The heartbeat's age is on the monotonic clock, whatever the
        driver's clock."""
        with self.lock:
            self._observe_clock()
            return self.guard.blocked(time.monotonic())

    def clock_reset(self) -> None:
        """The driver is setting its own clock back (a simulator reset an operator asked
        for): not a jump. Call it with the clock already set back, holding `lock`."""
        self.guard.clock_reset()

    def _observe_clock(self) -> float:
        """The driver's clock now, checked against its last reading (call with the lock held):
        a jump back engages the e-stop, said once in the log and on driver/rejections."""
        now_s = self.now_s()
        jumped = self.guard.observe_clock(now_s)
        if jumped is not None:
            self.node.get_logger().error(f"emergency stop ENGAGED: {jumped}")
            self.report(jumped)
        return now_s

    def paused(self, _now_s: float) -> str | None:
        """Why steps must wait now (a late heartbeat, not yet the timeout), or None. Each
        pause is counted and logged (every 10 s at most): many mean a loaded machine or a
        shield starved of CPU (docs/security.md)."""
        with self.lock:
            reason = self.guard.paused(time.monotonic())
        if reason is not None and not self._pausing:
            self.pauses += 1
            now = time.monotonic()
            if now - self._last_pause_report >= 10.0:
                self._last_pause_report = now
                self.node.get_logger().warning(
                    f"arm paused mid-chunk for a late shield heartbeat ({self.pauses} pauses since start): {reason}"
                )
        self._pausing = reason is not None
        return reason

    def _on_heartbeat(self, msg: EstopState) -> None:
        received = signing.signed(msg, names.SHIELD_HEARTBEAT)
        with self.lock:
            ignored = self.guard.on_heartbeat(received, self._observe_clock(), time.monotonic())
        if ignored is not None:
            self._report_throttled(f"heartbeat from {msg.source or 'unknown'} ignored: {ignored}")

    def _on_state(self, msg: EstopState) -> None:
        received, state = signing.signed(msg, names.ESTOP_STATE), signing.latch_state(msg)
        with self.lock:
            was = self.guard.estop
            ignored = self.guard.on_state(received, state, self._observe_clock(), time.monotonic())
            engaged = self.guard.estop and not was
            write_error = self.guard.latch.write_error
        if engaged and self.on_engage is not None:
            self.on_engage()
        if engaged:
            self.node.get_logger().warning(f"emergency stop ENGAGED ({msg.source}: {msg.reason})")
        elif was and not self.guard.estop:
            self.node.get_logger().info(f"emergency stop released ({msg.source}: {msg.reason})")
        if write_error:
            self.node.get_logger().error(write_error, throttle_duration_sec=10.0)
        if ignored is not None:
            self.report(f"e-stop state from {msg.source or 'unknown'} ignored: {ignored}")

    def _report_throttled(self, line: str) -> None:
        """Refused heartbeats come at 20 Hz: one report per second at most."""
        now = time.monotonic()
        if now - self._last_heartbeat_report >= 1.0:
            self._last_heartbeat_report = now
            self.report(line)

    def _on_set_estop(self, request: SetEstop.Request, response: SetEstop.Response) -> SetEstop.Response:
        if not request.active:
            response.status = SetEstop.Response.STATUS_INVALID_ARGUMENT
            response.message = (
                "a driver's e-stop is released only by the shield's signed state: release it on the shield "
                "(`carryon estop --release`)"
            )
        else:
            with self.lock:
                self.guard.engage(request.reason, request.source or "unknown", self.now_s())
            if self.on_engage is not None:
                self.on_engage()
            self.node.get_logger().warning(
                f"emergency stop ENGAGED at the driver by {request.source}: {request.reason}"
            )
            response.status = SetEstop.Response.STATUS_OK
            response.message = "emergency stop engaged at the driver"
        with self.lock:
            state = self.guard.latch.state
        response.state = EstopState(active=state.active, reason=state.reason, source=state.source)
        response.state.header.stamp = convert.time_to_msg(state.stamp_s)
        return response
